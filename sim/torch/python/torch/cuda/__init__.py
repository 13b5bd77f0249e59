"""torch.cuda, as far as the samples use it: lazy initialization (with _lazy_call's queue, as
torch/cuda/__init__.py has it), devices, synchronize, and the caching allocator's figures and
controls (torch/cuda/memory.py, re-exported here as PyTorch does)."""

import os
import threading

from .. import _C
from .memory import (OutOfMemoryError, _malloc, _free, change_current_allocator, empty_cache,  # noqa: F401
                     get_allocator_backend, max_memory_allocated, max_memory_reserved, memory_allocated,
                     memory_reserved, memory_stats, reset_accumulated_memory_stats, reset_peak_memory_stats,
                     )
from . import memory  # noqa: F401
from .graphs import CUDAGraph, graph, graph_pool_handle  # noqa: F401

if memory.MemPool is not None:  # 2.5 on
    MemPool, use_mem_pool = memory.MemPool, memory.use_mem_pool

_initialized = False
_queued_calls = []
_initialization_lock = threading.Lock()
_tls = threading.local()


class DeferredCudaCallError(Exception):
    pass


def device_count():
    import ctypes
    n = ctypes.c_int(0)
    return n.value if _C.cudart.cudaGetDeviceCount(ctypes.byref(n)) == 0 else 0


def is_available():
    return device_count() > 0


def is_initialized():
    return _initialized


def _lazy_call(callable, **kwargs):
    with _initialization_lock:
        if is_initialized():
            callable()
        else:
            _queued_calls.append((callable, None))


def _lazy_init():
    global _initialized
    if _initialized or hasattr(_tls, "is_initializing"):
        return
    with _initialization_lock:
        if _initialized:
            return
        count = device_count()
        if count == 0:
            raise RuntimeError("No CUDA GPUs are available")
        _C.c10_cuda.sim_torch_init(count)  # torch._C._cuda_init: the allocator's per-device state
        _tls.is_initializing = True
        try:
            for queued_call, _ in _queued_calls:
                try:
                    queued_call()
                except Exception as e:
                    raise DeferredCudaCallError(f"CUDA call failed lazily at initialization with error: {e}") from e
        finally:
            delattr(_tls, "is_initializing")
        _initialized = True


def init():
    _lazy_init()


def synchronize(device=None):
    if _initialized:
        _C.cudart.cudaDeviceSynchronize()


def current_device():
    return 0


class Stream:
    pass


def _current_stream():
    """The thread's current stream, as a raw cudaStream_t (None: the default stream). The stand-in's
    ops run on the default stream; only torch.cuda.graph makes its capture stream current."""
    return getattr(_tls, "stream", None)


def _set_current_stream(stream):
    _tls.stream = stream
