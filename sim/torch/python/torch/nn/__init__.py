"""torch.nn: Module (parameters and submodules), Parameter, Linear, ReLU, Sequential, Embedding
(whose weight gets a sparse gradient with sparse=True, as torch.nn.functional.embedding's backward
gives one)."""

from .. import autograd
from .._tensor import Tensor, sparse_coo_tensor, zeros_like


class Parameter(Tensor):
    def __init__(self, shape, dev="cpu", dtype="float32"):
        super().__init__(shape, dev, True, dtype)


class Module:
    def __init__(self):
        object.__setattr__(self, "_parameters", {})
        object.__setattr__(self, "_modules", {})

    def __setattr__(self, name, value):
        if isinstance(value, Parameter) or getattr(value, "_is_param", False):
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._modules[name] = value
        object.__setattr__(self, name, value)

    def parameters(self):
        for p in self._parameters.values():
            yield p
        for m in self._modules.values():
            yield from m.parameters()

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)


class Linear(Module):
    def __init__(self, in_features, out_features, bias=True, device=None, dtype="float32"):
        super().__init__()
        self.weight = Parameter((in_features, out_features), device or "cpu", dtype)
        if bias:
            self.bias = Parameter((out_features,), device or "cpu", dtype)

    def forward(self, x):
        return x @ self.weight


class ReLU(Module):
    def forward(self, x):
        return x.relu()


class Sequential(Module):
    def __init__(self, *modules):
        super().__init__()
        for i, m in enumerate(modules):
            setattr(self, str(i), m)

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x


class Embedding(Module):
    def __init__(self, num_embeddings, embedding_dim, sparse=False, device=None, dtype="float32"):
        super().__init__()
        self.sparse = sparse
        self.weight = Parameter((num_embeddings, embedding_dim), device or "cpu", dtype)

    def forward(self, indices):
        n, dim, weight = indices.numel(), self.weight.shape[1], self.weight

        def gradient(inp):
            if inp is not weight or not self.sparse:
                return zeros_like(inp)
            return sparse_coo_tensor(Tensor((1, n), weight.device, False, "int64"),
                                     Tensor((n, dim), weight.device, False, weight.dtype), weight.shape)

        return autograd._op((n, dim), (indices, weight), gradient)
