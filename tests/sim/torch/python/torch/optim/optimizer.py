"""The optimizer's base and its global step hooks (register_optimizer_step_pre_hook and
register_optimizer_step_post_hook, called around every optimizer's step as PyTorch calls them)."""

_global_optimizer_pre_hooks = {}
_global_optimizer_post_hooks = {}


def register_optimizer_step_pre_hook(hook):
    _global_optimizer_pre_hooks[id(hook)] = hook


def register_optimizer_step_post_hook(hook):
    _global_optimizer_post_hooks[id(hook)] = hook


class Optimizer:
    def __init__(self, params, defaults):
        self.defaults = defaults
        self.state = {}
        self.param_groups = [dict(defaults, params=list(params))]

    def step(self, *args, **kwargs):
        for hook in list(_global_optimizer_pre_hooks.values()):
            hook(self, args, kwargs)
        out = self._step()
        for hook in list(_global_optimizer_post_hooks.values()):
            hook(self, args, kwargs)
        return out

    def zero_grad(self, set_to_none=True):
        for group in self.param_groups:
            for p in group["params"]:
                p.grad = None
