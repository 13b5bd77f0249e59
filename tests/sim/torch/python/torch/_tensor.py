"""Tensors: a shape and, on CUDA, a block of the caching allocator, freed when the last reference
goes (as PyTorch's storage is). Ops allocate their results; autograd keeps what backward needs."""

import itertools

from . import autograd, cuda

_fake_addresses = itertools.count(0x10000, 4096)  # CPU tensors: an address each, no memory


class device:
    def __init__(self, spec):
        if isinstance(spec, device):
            self.type, self.index = spec.type, spec.index
            return
        spec = str(spec)
        self.type, _, index = spec.partition(":")
        self.index = int(index) if index else (0 if self.type == "cuda" else None)

    def __repr__(self):
        return f"device(type='{self.type}', index={self.index})"


class _Storage:
    __slots__ = ("ptr", "nbytes", "device", "wait_for_streams")

    def __init__(self, nbytes, dev):
        self.nbytes, self.device, self.wait_for_streams, self.ptr = nbytes, dev, False, 0
        self.ptr = cuda._malloc(nbytes, dev.index) if dev.type == "cuda" else next(_fake_addresses)

    def __del__(self):
        if self.device.type == "cuda" and self.ptr:
            cuda._free(self.ptr, self.wait_for_streams)


_sizes = {"float32": 4, "float16": 2, "bfloat16": 2}


class Tensor:
    def __init__(self, shape, dev="cpu", requires_grad=False, dtype="float32"):
        self.shape = tuple(shape)
        self.dtype = dtype
        self.device = device(dev)
        self.requires_grad = requires_grad
        self.grad = None
        self._ctx = None  # (inputs, backward function) of the op that made it
        self._storage = _Storage(max(1, self.numel()) * self.element_size(), self.device)

    def numel(self):
        n = 1
        for d in self.shape:
            n *= d
        return n

    def element_size(self):
        return _sizes[self.dtype]

    def data_ptr(self):
        return self._storage.ptr

    @property
    def is_cuda(self):
        return self.device.type == "cuda"

    def record_stream(self, stream):
        self._storage.wait_for_streams = True

    def to(self, dev):
        return Tensor(self.shape, dev, self.requires_grad, self.dtype)

    def cuda(self):
        return self.to("cuda")

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[dim]

    def __matmul__(self, other):
        return autograd._op((self.shape[0], other.shape[-1]), (self, other))

    def relu(self):
        return autograd._op(self.shape, (self,))

    def sum(self):
        return autograd._op((), (self,))

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        autograd.backward(self, gradient, retain_graph, create_graph, inputs=inputs)

    def __repr__(self):
        return f"tensor(shape={self.shape}, device={self.device})"


def empty(*shape, device="cpu", dtype="float32", requires_grad=False):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    return Tensor(shape, device, requires_grad, dtype)


zeros = ones = randn = empty


def zeros_like(t):
    return Tensor(t.shape, t.device, False, t.dtype)
