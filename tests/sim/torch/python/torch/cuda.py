"""torch.cuda, as far as the samples use it: lazy initialization (with _lazy_call's queue, as
PyTorch's), and the caching allocator's figures."""

import ctypes
import os
import threading

_here = os.path.dirname(os.path.abspath(__file__))
_lib_dir = os.path.join(os.path.dirname(os.path.dirname(_here)), "lib")  # site-packages/torch/../../lib
_c10_cuda = ctypes.CDLL(os.path.join(_lib_dir, "libc10_cuda.so"))  # CDLL: calls release the GIL
_torch_cuda = ctypes.CDLL(os.path.join(_lib_dir, "libtorch_cuda.so"))
_cudart = ctypes.CDLL("libcudart.so.13")

_c10_cuda.sim_torch_malloc.restype = ctypes.c_uint64
_c10_cuda.sim_torch_malloc.argtypes = [ctypes.c_uint64, ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
_c10_cuda.sim_torch_free.argtypes = [ctypes.c_uint64, ctypes.c_int]
_c10_cuda.sim_torch_stats.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_uint64)]

_initialized = False
_queued_calls = []
_initialization_lock = threading.Lock()
_tls = threading.local()


class OutOfMemoryError(RuntimeError):
    pass


class DeferredCudaCallError(Exception):
    pass


def device_count():
    n = ctypes.c_int(0)
    return n.value if _cudart.cudaGetDeviceCount(ctypes.byref(n)) == 0 else 0


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
        conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
        expandable = "expandable_segments:True" in conf.replace(" ", "")
        _c10_cuda.sim_torch_init(count, 1 if expandable else 0)
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


def _malloc(nbytes, device):
    _lazy_init()
    error = ctypes.create_string_buffer(512)
    ptr = _c10_cuda.sim_torch_malloc(nbytes, device, None, error, len(error))
    if not ptr:
        raise OutOfMemoryError(error.value.decode())
    return ptr


def _free(ptr, wait_for_streams):
    _c10_cuda.sim_torch_free(ptr, 1 if wait_for_streams else 0)


def _stats(device=0):
    out = (ctypes.c_uint64 * 8)()
    if _initialized:
        _c10_cuda.sim_torch_stats(_index(device), out)
    return list(out)


def _index(device):
    if device is None:
        return 0
    if isinstance(device, int):
        return device
    return getattr(device, "index", None) or 0


def memory_allocated(device=None):
    return _stats(device)[0]


def max_memory_allocated(device=None):
    return _stats(device)[1]


def memory_reserved(device=None):
    return _stats(device)[2]


def max_memory_reserved(device=None):
    return _stats(device)[3]


def memory_stats(device=None):
    s = _stats(device)
    return {"allocated_bytes.all.current": s[0], "allocated_bytes.all.peak": s[1],
            "reserved_bytes.all.current": s[2], "reserved_bytes.all.peak": s[3],
            "segment.all.current": s[4], "num_ooms": s[5], "allocation.all.allocated": s[6],
            "segment.all.allocated": s[7]}


def reset_peak_memory_stats(device=None):
    if _initialized:
        _c10_cuda.sim_torch_reset_peak(_index(device))


def empty_cache():
    if _initialized:
        _c10_cuda.sim_torch_empty_cache()


def synchronize(device=None):
    if _initialized:
        _c10_cuda.sim_torch_synchronize()


def get_allocator_backend():
    return "native"


class Stream:
    pass


class memory:  # torch.cuda.memory.change_current_allocator, for the test that replaces the allocator
    @staticmethod
    def change_current_allocator(_allocator=None):
        _torch_cuda.sim_torch_use_pluggable_allocator()
