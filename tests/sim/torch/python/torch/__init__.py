"""A stand-in for PyTorch, for memtrace's tests on the simulated device: the few pieces of
PyTorch's Python API that the samples use (tensors on CUDA, a Linear/ReLU/Sequential model,
autograd, AdamW, torch.cuda's memory figures), over a caching allocator in C++ (lib/libc10_cuda.so)
that reports its events to trace trackers as PyTorch's does, and an exported pluggable allocator
class (lib/libtorch_cuda.so). Like PyTorch's, every op releases the GIL (ctypes.CDLL) and CUDA is
initialized lazily, on the first CUDA tensor. It is no part of memtrace.
"""

__version__ = "2.11.0+memtrace.sim"

float32 = "float32"
float16 = "float16"
bfloat16 = "bfloat16"

from . import cuda  # noqa: E402
from . import autograd  # noqa: E402
from ._tensor import Tensor, device, empty, ones, randn, zeros, zeros_like  # noqa: E402,F401
from . import nn  # noqa: E402
from . import optim  # noqa: E402
