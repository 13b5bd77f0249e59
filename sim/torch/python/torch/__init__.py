"""A stand-in for PyTorch, for memtrace's tests on the simulated device: the few pieces of
PyTorch's Python API that the samples use (tensors on CUDA, a Linear/ReLU/Sequential/Embedding
model, autograd, AdamW and SGD, DTensor and fully_shard, torch.cuda's memory figures, history and
pools), over a caching allocator in C++ (lib/libc10_cuda.so) that reports its events to trace
trackers as PyTorch's does, and a pluggable allocator class (lib/libtorch_cuda.so). Like
PyTorch's, every op releases the GIL (ctypes.CDLL) and CUDA is initialized lazily, on the first
CUDA tensor. Its release (torch/version.py) decides what differs between PyTorch's releases. It is
no part of memtrace.
"""

from .version import __version__  # noqa: F401

float32 = "float32"
float16 = "float16"
bfloat16 = "bfloat16"
int64 = "int64"
int8 = "int8"
uint8 = "uint8"

from . import _C  # noqa: E402,F401
from . import cuda  # noqa: E402
from . import autograd  # noqa: E402
from ._tensor import (Tensor, device, empty, ones, randn, sparse_coo, sparse_coo_tensor, strided, zeros,  # noqa: E402,F401
                      zeros_like)
from . import nn  # noqa: E402
from . import optim  # noqa: E402
from . import compiler  # noqa: E402,F401


def compile(model=None, *, fullgraph=False, dynamic=None, backend="inductor", mode=None, options=None, disable=False):
    """torch.compile: imports torch._dynamo (not imported with torch) and wraps MODEL."""
    import torch._dynamo
    if model is None:
        return lambda m: compile(m, fullgraph=fullgraph)
    return torch._dynamo.optimize(fullgraph)(model)
