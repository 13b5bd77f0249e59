"""torch._C, as far as the stand-in needs it: the CUDA allocator's bindings of
torch/csrc/cuda/Module.cpp, over the stand-in's libc10_cuda.so and libtorch_cuda.so (lib/). Every
call goes through ctypes.CDLL, which releases the GIL, as PyTorch's ops do."""

import ctypes
import json
import os

from .version import __version__

_minor = int(__version__.split(".")[1])
_here = os.path.dirname(os.path.abspath(__file__))
_lib_dir = os.path.join(os.path.dirname(os.path.dirname(_here)), "lib")  # site-packages/torch/../../lib
c10_cuda = ctypes.CDLL(os.path.join(_lib_dir, "libc10_cuda.so"))  # CDLL: calls release the GIL
# The same library called with the GIL held, as a pybind11 extension's function calls at::empty
# (pybind11 keeps the GIL unless the binding releases it): _sim_extension.py.
c10_cuda_holding_gil = ctypes.PyDLL(os.path.join(_lib_dir, "libc10_cuda.so"))
torch_cuda = ctypes.CDLL(os.path.join(_lib_dir, "libtorch_cuda.so"))
cudart = ctypes.CDLL("libcudart.so.13")

c10_cuda.sim_torch_malloc.restype = ctypes.c_uint64
c10_cuda.sim_torch_malloc.argtypes = [ctypes.c_uint64, ctypes.c_int, ctypes.c_void_p, ctypes.c_int64,
                                      ctypes.c_char_p, ctypes.c_size_t]
c10_cuda.sim_torch_free.argtypes = [ctypes.c_uint64, ctypes.c_int]
c10_cuda_holding_gil.sim_torch_malloc.restype = ctypes.c_uint64
c10_cuda_holding_gil.sim_torch_malloc.argtypes = c10_cuda.sim_torch_malloc.argtypes
c10_cuda.sim_torch_stats.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_int64), ctypes.c_char_p, ctypes.c_size_t]
c10_cuda.sim_torch_reset_peak.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
c10_cuda.sim_torch_release_pool.argtypes = [ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64]
c10_cuda.sim_torch_backend.restype = ctypes.c_char_p
c10_cuda.sim_torch_record_history.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_uint64, ctypes.c_char_p,
                                              ctypes.c_size_t]
c10_cuda.sim_torch_snapshot.restype = ctypes.c_char_p
c10_cuda.sim_torch_snapshot.argtypes = []
c10_cuda.sim_torch_begin_pool.argtypes = [ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_void_p]
_OBSERVER = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64)
c10_cuda.sim_torch_attach_oom_observer.argtypes = [_OBSERVER, ctypes.c_char_p, ctypes.c_size_t]
torch_cuda.sim_torch_pluggable_create.restype = ctypes.c_void_p
torch_cuda.sim_torch_pluggable_create.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
torch_cuda.sim_torch_change_current_allocator.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]


def _error_buffer():
    return ctypes.create_string_buffer(512)


def _cuda_getAllocatorBackend():
    return c10_cuda.sim_torch_backend().decode()


_observers = []  # the ctypes callbacks must outlive the allocator's use of them


def _cuda_attach_out_of_memory_observer(observer):
    """observer(device, alloc, device_allocated, device_free), called with the GIL after the
    allocator's lock is released (ctypes' callbacks take the GIL, as py::gil_scoped_acquire does)."""
    from . import cuda
    cuda._lazy_init()

    def call(device, alloc, total, free):
        observer(device, alloc, total, free)

    callback = _OBSERVER(call)
    error = _error_buffer()
    if c10_cuda.sim_torch_attach_oom_observer(callback, error, len(error)) != 0:
        raise RuntimeError(error.value.decode())
    _observers.append(callback)


_LEVELS = {None: 0, "state": 1, "alloc": 2, "all": 3}  # RecordContext: NEVER, STATE, ALLOC, ALL


def _record_history(enabled, level, max_entries):
    error = _error_buffer()
    if c10_cuda.sim_torch_record_history(1 if enabled else 0, level, min(max_entries, (1 << 63) - 1), error,
                                         len(error)) != 0:
        raise RuntimeError(error.value.decode())


def _cuda_record_memory_history(enabled, context, stacks, max_entries):
    """torch/csrc/cuda/memory_snapshot.cpp (2.6): the history is on unless ENABLED is None, with
    MAX_ENTRIES entries for "all" and 1 for "state"; frames recorded from CONTEXT's level on."""
    for name, value, allowed in (("state", enabled, (None, "state", "all")),
                                 ("context", context, tuple(_LEVELS))):
        if value not in allowed:
            raise RuntimeError(f"expected {name} to be one of {allowed}")
    _record_history(enabled is not None, _LEVELS[context], max_entries if enabled == "all" else 1)


def _cuda_record_memory_history_legacy(enabled, record_context, trace_alloc_max_entries, trace_alloc_record_context,
                                       record_context_cpp):
    level = 0 if not enabled else 2 if trace_alloc_record_context else 1 if record_context else 0
    _record_history(enabled, level, trace_alloc_max_entries)
    return level


def _cuda_memorySnapshot():
    text = c10_cuda.sim_torch_snapshot().decode()
    if text.startswith("!"):  # this allocator refuses
        raise RuntimeError(text[1:])
    return json.loads(text)


def _cuda_beginAllocateToPool(device, pool_id, allocator_handle=None):
    c10_cuda.sim_torch_begin_pool(device, pool_id[0], pool_id[1], allocator_handle)


def _cuda_endAllocateCurrentStreamToPool(device, pool_id):
    c10_cuda.sim_torch_end_pool(device)


def _cuda_releasePool(device, pool_id):
    c10_cuda.sim_torch_release_pool(device, pool_id[0], pool_id[1])


def _cuda_customAllocator(alloc_fn, free_fn):
    return torch_cuda.sim_torch_pluggable_create(alloc_fn, free_fn)


def _cuda_changeCurrentAllocator(handle):
    error = _error_buffer()
    if torch_cuda.sim_torch_change_current_allocator(handle, error, len(error)) != 0:
        raise RuntimeError(error.value.decode())
