"""torch.optim: Optimizer (param groups, state, step hooks as PyTorch calls them), AdamW and SGD
(the one of the two that takes sparse gradients, as torch/optim/adamw.py refuses them). The
module torch.optim.optimizer, where the global step hooks are registered, is imported and then
taken out of the package's names, as torch/optim/__init__.py does (`del optimizer`: 1.13, whose
copy Debian's python3-torch installs, through 2.11): it is reached as sys.modules'
"torch.optim.optimizer" or by `import torch.optim.optimizer`, never as torch.optim.optimizer."""

from .optimizer import Optimizer


class AdamW(Optimizer):
    def __init__(self, params, lr=1e-3, weight_decay=0.01):
        super().__init__(params, {"lr": lr, "weight_decay": weight_decay})

    def _step(self):
        from .._tensor import zeros_like
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("AdamW does not support sparse gradients")
                state = self.state.setdefault(p, {})
                if not state:  # created on the first step, kept for the run: optimizer state
                    state["exp_avg"] = zeros_like(p)
                    state["exp_avg_sq"] = zeros_like(p)


class SGD(Optimizer):
    def __init__(self, params, lr=1e-3):
        super().__init__(params, {"lr": lr})

    def _step(self):
        pass  # no momentum, no state: the parameters change in place


del optimizer  # noqa: F821 (bound by the import of .optimizer above)

__all__ = ["AdamW", "Optimizer", "SGD"]
