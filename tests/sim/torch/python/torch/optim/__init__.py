"""torch.optim: Optimizer (param groups, state, step hooks as PyTorch calls them) and AdamW."""

from . import optimizer
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
                state = self.state.setdefault(p, {})
                if not state:  # created on the first step, kept for the run: optimizer state
                    state["exp_avg"] = zeros_like(p)
                    state["exp_avg_sq"] = zeros_like(p)


__all__ = ["AdamW", "Optimizer", "optimizer"]
