"""torch.cuda.memory: the caching allocator's figures (memory_stats and the functions over it,
as torch/cuda/memory.py computes them from _C._cuda_memoryStats), its history
(_record_memory_history, _snapshot), replacing it (CUDAPluggableAllocator,
change_current_allocator) and private pools (MemPool, use_mem_pool: 2.5 on)."""

import collections
import contextlib
import ctypes
import itertools
import sys
import traceback

from .. import _C

_minor = _C._minor


class OutOfMemoryError(RuntimeError):
    pass


def _lazy_init():
    from . import _lazy_init
    _lazy_init()


def _initialized():
    from . import is_initialized
    return is_initialized()


# Frames recorded with the history (context="alloc" or "all"): the stand-in's context ids.
_contexts = {}
_context_ids = itertools.count(1)
_record_context = False
_record_cpp = False


def _context():
    if not _record_context:
        return 0
    frames = [{"filename": f.filename, "line": f.lineno, "name": f.name}
              for f in reversed(traceback.extract_stack()[:-3])]
    if _record_cpp:  # stacks="all": the C++ frames under the Python ones, as CapturedTraceback gathers them
        frames = [{"filename": "??", "line": 0, "name": "c10::cuda::CUDACachingAllocator::Native::"
                   "DeviceCachingAllocator::malloc(signed char, unsigned long, CUstream_st*)"},
                  {"filename": "??", "line": 0, "name": "at::empty_cuda"}] + frames + [
                  {"filename": "??", "line": 0, "name": "_PyEval_EvalFrameDefault"},
                  {"filename": "??", "line": 0, "name": "pymain_run_python"}]
    cid = next(_context_ids)
    _contexts[cid] = frames
    return cid


def _malloc(nbytes, device, holding_gil=False):
    _lazy_init()
    error = ctypes.create_string_buffer(512)
    lib = _C.c10_cuda_holding_gil if holding_gil else _C.c10_cuda
    ptr = lib.sim_torch_malloc(nbytes, device, None, _context(), error, len(error))
    if not ptr:
        raise OutOfMemoryError(error.value.decode())
    return ptr


def _free(ptr, record_stream):
    # An unknown pointer: TORCH_CHECK(false, "invalid device pointer: ", ptr) in PyTorch's
    # NativeCachingAllocator::free (c10/cuda/CUDACachingAllocator.cpp, every 2.x release), a
    # RuntimeError.
    if _C.c10_cuda.sim_torch_free(ptr, 1 if record_stream else 0) != 0:
        raise RuntimeError("invalid device pointer: 0x%x" % ptr)


def _index(device):
    if device is None:
        return 0
    if isinstance(device, int):
        return device
    return getattr(device, "index", None) or 0


_STAT_ARRAYS = ("allocation", "segment", "active", "allocated_bytes", "reserved_bytes", "active_bytes",
                "requested_bytes")


def memory_stats(device=None):
    """The flattened, sorted dict of memory_stats_as_nested_dict ({} before CUDA is initialized)."""
    if not _initialized():
        return collections.OrderedDict()
    out = (ctypes.c_int64 * (len(_STAT_ARRAYS) * 12 + 4))()
    error = ctypes.create_string_buffer(512)
    if _C.c10_cuda.sim_torch_stats(_index(device), out, error, len(error)) != 0:
        raise RuntimeError(error.value.decode())
    values = iter(out)
    result = {}
    for name in _STAT_ARRAYS:
        for pool in ("all", "small_pool", "large_pool"):
            for metric in ("current", "peak", "allocated", "freed"):
                result[f"{name}.{pool}.{metric}"] = next(values)
    for name in ("inactive_split", "inactive_split_bytes"):
        for pool in ("all", "small_pool", "large_pool"):
            for metric in ("current", "peak", "allocated", "freed"):
                result[f"{name}.{pool}.{metric}"] = 0
    for name in ("oversize_allocations", "oversize_segments"):
        for metric in ("current", "peak", "allocated", "freed"):
            result[f"{name}.{metric}"] = 0
    for name in ("num_alloc_retries", "num_ooms", "num_device_alloc", "num_device_free"):
        result[name] = next(values)
    result["max_split_size"] = -1  # SIZE_MAX, as int64
    result["num_sync_all_streams"] = 0
    return collections.OrderedDict(sorted(result.items()))


def memory_allocated(device=None):
    return memory_stats(device).get("allocated_bytes.all.current", 0)


def max_memory_allocated(device=None):
    return memory_stats(device).get("allocated_bytes.all.peak", 0)


def memory_reserved(device=None):
    return memory_stats(device).get("reserved_bytes.all.current", 0)


def max_memory_reserved(device=None):
    return memory_stats(device).get("reserved_bytes.all.peak", 0)


def reset_peak_memory_stats(device=None):
    error = ctypes.create_string_buffer(512)
    if _C.c10_cuda.sim_torch_reset_peak(_index(device), error, len(error)) != 0:
        raise RuntimeError(error.value.decode())


def reset_accumulated_memory_stats(device=None):
    if _initialized():
        _C.c10_cuda.sim_torch_reset_accumulated(_index(device))


def empty_cache():
    if _initialized():
        _C.c10_cuda.sim_torch_empty_cache()


def get_allocator_backend():
    return _C._cuda_getAllocatorBackend()


def _record_memory_history_legacy(enabled, record_context=True, trace_alloc_max_entries=1,
                                  trace_alloc_record_context=False, device=None, record_context_cpp=False):
    global _record_context, _record_cpp
    _lazy_init()
    level = _C._cuda_record_memory_history_legacy(enabled, record_context, trace_alloc_max_entries,
                                                 trace_alloc_record_context, record_context_cpp)
    _record_context, _record_cpp = level > 0, record_context_cpp


def _record_memory_history(enabled="all", *args, **kwargs):
    if isinstance(enabled, bool):
        return _record_memory_history_legacy(enabled, *args, **kwargs)
    return _record_memory_history_impl(enabled, *args, **kwargs)


def _record_memory_history_impl(enabled="all", context="all", stacks="all", max_entries=sys.maxsize, device=None):
    global _record_context, _record_cpp
    _lazy_init()
    _C._cuda_record_memory_history(enabled, context, stacks, max_entries)
    _record_context = context in ("alloc", "all", "state")
    _record_cpp = stacks == "all"


def _snapshot(device=None):
    """segments and device_traces, as _C._cuda_memorySnapshot builds them; 2.1's traces carry no
    time_us (added with the 2.2 sources)."""
    snapshot = _C._cuda_memorySnapshot()

    def frames(item):
        return _contexts.get(item.pop("context", 0), [])

    for segment in snapshot["segments"]:
        segment["frames"] = frames(segment)
        segment["segment_pool_id"] = tuple(segment["segment_pool_id"])
        for block in segment["blocks"]:
            block["frames"] = frames(block)
    for trace in snapshot["device_traces"]:
        for entry in trace:
            f = frames(entry)
            if f:
                entry["frames"] = f
            if _minor < 2:
                del entry["time_us"]
    return snapshot


def _dump_snapshot(filename="dump_snapshot.pickle"):
    import pickle
    with open(filename, "wb") as f:
        pickle.dump(_snapshot(), f)


class _CUDAAllocator:
    def __init__(self, handle):
        self._handle = handle


class CUDAPluggableAllocator:
    """The alloc and free functions of a shared library, as an allocator."""

    def __init__(self, path_to_so_file, alloc_fn_name, free_fn_name):
        library = ctypes.CDLL(path_to_so_file)
        alloc_fn = ctypes.cast(getattr(library, alloc_fn_name), ctypes.c_void_p).value
        free_fn = ctypes.cast(getattr(library, free_fn_name), ctypes.c_void_p).value
        self._library = library
        self._allocator = _CUDAAllocator(_C._cuda_customAllocator(alloc_fn, free_fn))

    def allocator(self):
        return self._allocator


def change_current_allocator(allocator):
    _C._cuda_changeCurrentAllocator(allocator.allocator()._handle)


# MemPool::uid_ (c10/cuda/CUDACachingAllocator.cpp v2.6.0, from 1): the ids of the user's pools,
# MemPools and graph_pool_handle()s alike.
_user_pool_uids = itertools.count(1)

if _minor >= 5:
    class MemPool:
        """A private pool of the caching allocator (torch.cuda.MemPool, 2.5 on): ids (0, n) for
        user pools; with an allocator, its segments come from that allocator."""

        def __init__(self, allocator=None):
            self.id = (0, next(_user_pool_uids))
            self._allocator = allocator

        @property
        def allocator(self):
            return self._allocator

        def __del__(self):  # ~MemPool: its cached segments go (emptyCache)
            try:
                empty_cache()
            except Exception:
                pass

    @contextlib.contextmanager
    def use_mem_pool(pool, device=None):
        _lazy_init()
        index = _index(device)
        handle = pool.allocator._handle if pool.allocator is not None else None
        _C._cuda_beginAllocateToPool(index, pool.id, handle)
        try:
            yield
        finally:
            _C._cuda_endAllocateCurrentStreamToPool(index, pool.id)
            _C._cuda_releasePool(index, pool.id)
else:
    MemPool = use_mem_pool = None
