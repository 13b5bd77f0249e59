"""The optimizer's base and its global step hooks (register_optimizer_step_pre_hook and
register_optimizer_step_post_hook, called around every optimizer's step as torch/optim/optimizer.py
calls them: profile_hook_step runs the pre-hooks, then the step through _use_grad_for_differentiable,
which imports torch._dynamo and breaks the graph before and after it (2.6; left lazy in the 2.1
build, whose source was not read), then the post-hooks, each hook with (self, args, kwargs) where
args holds self)."""

import sys

_global_optimizer_pre_hooks = {}
_global_optimizer_post_hooks = {}


class RemovableHandle:
    def __init__(self, hooks, key):
        self.hooks, self.key = hooks, key

    def remove(self):
        self.hooks.pop(self.key, None)


def register_optimizer_step_pre_hook(hook):
    _global_optimizer_pre_hooks[id(hook)] = hook
    return RemovableHandle(_global_optimizer_pre_hooks, id(hook))


def register_optimizer_step_post_hook(hook):
    _global_optimizer_post_hooks[id(hook)] = hook
    return RemovableHandle(_global_optimizer_post_hooks, id(hook))


def _graph_break():
    from ..version import __version__
    if int(__version__.split(".")[1]) >= 3:
        import torch._dynamo  # noqa: F401
    dynamo = sys.modules.get("torch._dynamo")
    if dynamo is not None:
        dynamo.graph_break()


class Optimizer:
    def __init__(self, params, defaults):
        self.defaults = defaults
        self.state = {}
        self.param_groups = [dict(defaults, params=list(params))]

    def step(self, *args, **kwargs):
        args = (self,) + args
        for hook in list(_global_optimizer_pre_hooks.values()):
            hook(self, args, kwargs)
        _graph_break()  # _use_grad_for_differentiable, around the step itself
        out = self._step()
        _graph_break()
        for hook in list(_global_optimizer_post_hooks.values()):
            hook(self, args, kwargs)
        return out

    def zero_grad(self, set_to_none=True):
        for group in self.param_groups:
            for p in group["params"]:
                p.grad = None
