"""Tensors: a shape and, on CUDA, a block of the caching allocator, freed when the last reference
goes (as PyTorch's storage is). Ops allocate their results; autograd keeps what backward needs.

Tensors without storage of their own, as PyTorch has them (c10/core/TensorImpl.h, data_impl and
throw_data_ptr_access_error; torch/csrc/autograd/python_variable.cpp, make_wrapper_subclass):
  - sparse COO tensors (nn.Embedding(sparse=True)'s gradient): data_ptr() raises "Cannot access
    data pointer of Tensor that doesn't have storage"; the memory is in _values() and _indices();
  - wrapper subclasses (DTensor, FSDP2's parameters): a storage with a null data pointer, so
    data_ptr() is 0 ("LocalTensor's wrapper subclass has no real storage (data_ptr()=0)",
    pytorch/pytorch#174772); the memory is in the wrapped local tensor.
"""

import itertools

from . import autograd, cuda

_fake_addresses = itertools.count(0x10000, 4096)  # CPU tensors: an address each, no memory

strided = "torch.strided"
sparse_coo = "torch.sparse_coo"


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
    __slots__ = ("ptr", "nbytes", "device", "record_stream")

    def __init__(self, nbytes, dev, holding_gil=False):  # nbytes > 0
        self.nbytes, self.device, self.record_stream, self.ptr = nbytes, dev, False, 0
        self.ptr = cuda._malloc(nbytes, dev.index, holding_gil) if dev.type == "cuda" else next(_fake_addresses)

    def __del__(self):
        if self.device.type == "cuda" and self.ptr:
            cuda._free(self.ptr, self.record_stream)


_sizes = {"float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int8": 1, "uint8": 1}


class Tensor:
    layout = strided

    def __init__(self, shape, dev="cpu", requires_grad=False, dtype="float32"):
        self._init(shape, dev, requires_grad, dtype)
        # No block for an empty tensor (CUDACachingAllocator.cpp allocate(0) mallocs nothing).
        self._storage = _Storage(self.numel() * self.element_size(), self.device) if self.numel() else None

    def _init(self, shape, dev, requires_grad, dtype):
        self.shape = tuple(shape)
        self.dtype = dtype
        self.device = device(dev)
        self.requires_grad = requires_grad
        self.grad = None
        self._ctx = None  # (inputs, gradient maker) of the op that made it
        self._storage = None

    @staticmethod
    def _make_wrapper_subclass(cls, shape, dev="cpu", requires_grad=False, dtype="float32"):
        t = object.__new__(cls)
        Tensor._init(t, shape, dev, requires_grad, dtype)
        return t

    def numel(self):
        n = 1
        for d in self.shape:
            n *= d
        return n

    def element_size(self):
        return _sizes[self.dtype]

    def data_ptr(self):
        return self._storage.ptr if self._storage is not None else 0

    @property
    def is_cuda(self):
        return self.device.type == "cuda"

    @property
    def is_sparse(self):
        return self.layout == sparse_coo

    def record_stream(self, stream):
        # recordStream on the stream it was allocated on is a no-op (CCA recordStream); on another
        # stream, the free waits for that stream's work.
        if self._storage is not None and stream is not None:
            self._storage.record_stream = True

    def to(self, dev):
        return Tensor(self.shape, dev, self.requires_grad, self.dtype)

    def cuda(self):
        return self.to("cuda")

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[dim]

    def __matmul__(self, other):
        if self.is_cuda:  # at::cuda::blas::gemm: the thread's cuBLAS handle, its workspace
            from . import _cublas
            _cublas.current_handle(self.device.index)
        return autograd._op((self.shape[0], other.shape[-1]), (self, other))

    def relu(self):
        return autograd._op(self.shape, (self,))

    def sum(self):
        return autograd._op((), (self,))

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        autograd.backward(self, gradient, retain_graph, create_graph, inputs=inputs)

    def __repr__(self):
        return f"tensor(shape={self.shape}, device={self.device})"


class _SparseTensor(Tensor):
    layout = sparse_coo

    def __init__(self, indices, values, shape):
        self._init(shape, values.device, False, values.dtype)
        self.__indices, self.__values = indices, values

    def data_ptr(self):
        raise RuntimeError("Cannot access data pointer of Tensor that doesn't have storage")

    def _indices(self):
        return self.__indices

    def _values(self):
        return self.__values


def sparse_coo_tensor(indices, values, size):
    return _SparseTensor(indices, values, size)


def empty(*shape, device="cpu", dtype="float32", requires_grad=False):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    return Tensor(shape, device, requires_grad, dtype)


zeros = ones = randn = empty


def zeros_like(t):
    if type(t) is not Tensor and hasattr(type(t), "_zeros_like"):
        return type(t)._zeros_like(t)
    return Tensor(t.shape, t.device, False, t.dtype)
