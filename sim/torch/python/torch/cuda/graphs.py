"""torch.cuda's CUDA graphs (torch/cuda/graphs.py over aten/src/ATen/cuda/CUDAGraph.cpp, read at
v2.6.0), as far as memory goes: a capture allocates from a private pool of the caching allocator,
kept until the graph is reset, so that its replays find their tensors where the capture put them.

- graph_pool_handle(): a pool id of a user's kind, {0, uid} (MemPool's is_user_created counter,
  shared with torch.cuda.MemPool), for several captures to share one pool;
- CUDAGraph.capture_begin(pool=None): mempool_id_ = pool, else a pool of its own {uuid, 0}
  (MemPool(nullptr, is_user_created=false)); beginAllocateToPool(device, mempool_id_, the
  capture stream's filter); cudaStreamBeginCapture(capture stream, cudaStreamCaptureModeGlobal);
- capture_end(): cudaStreamEndCapture, endAllocateToPool, cudaGraphInstantiateWithFlags (here
  cudaGraphInstantiate with the same flags, which CUDA 12 on takes: the simulated runtime has no
  WithFlags form);
- replay(): cudaGraphLaunch on the current stream (here the capture stream: the stand-in has no
  current stream);
- reset() (and the destructor): cudaGraphExecDestroy, cudaGraphDestroy, releasePool: the pool's
  cached segments are freed at the next empty_cache once no graph uses it;
- graph(cuda_graph, pool=None, stream=None): synchronize, gc.collect, empty_cache, then the
  capture on a side stream (a stream of its own by default: capturing the legacy default stream is
  an error in CUDA).

The stand-in's allocator keeps no streams: the capture's tensors come from its pool on stream 0."""

import ctypes
import gc
import itertools

from .. import _C

# MemPool's counters (c10/cuda/CUDACachingAllocator.cpp v2.6.0, MemPool::uid_ and uuid_, both from 1):
# the user's kind shares torch.cuda.MemPool's.
_capture_uuids = itertools.count(1)


def _user_uids():
    from . import memory
    return memory._user_pool_uids


def graph_pool_handle():
    return (0, next(_user_uids()))


class CUDAGraph:
    def __init__(self):
        self._graph = ctypes.c_void_p()
        self._exec = ctypes.c_void_p()
        self._stream = None
        self.pool_id = None
        self._capture_ended = False

    def capture_begin(self, pool=None, capture_error_mode="global", stream=None):
        from . import _lazy_init
        _lazy_init()
        self.pool_id = tuple(pool) if pool is not None else (next(_capture_uuids), 0)
        self._stream = stream if stream is not None else _side_stream()
        _C.c10_cuda.sim_torch_begin_pool(0, self.pool_id[0], self.pool_id[1], None)
        modes = {"global": 0, "thread_local": 1, "relaxed": 2}
        if _C.cudart.cudaStreamBeginCapture(self._stream, modes[capture_error_mode]) != 0:
            raise RuntimeError("cudaStreamBeginCapture failed")

    def capture_end(self):
        status = _C.cudart.cudaStreamEndCapture(self._stream, ctypes.byref(self._graph))
        _C.c10_cuda.sim_torch_end_pool(0)
        if status != 0:
            raise RuntimeError("cudaStreamEndCapture failed")
        self._capture_ended = True
        if _C.cudart.cudaGraphInstantiate(ctypes.byref(self._exec), self._graph, ctypes.c_ulonglong(0)) != 0:
            raise RuntimeError("cudaGraphInstantiate failed")

    def replay(self):
        if _C.cudart.cudaGraphLaunch(self._exec, self._stream) != 0:
            raise RuntimeError("cudaGraphLaunch failed")

    def pool(self):
        return self.pool_id

    def reset(self):
        if self._exec.value:
            _C.cudart.cudaGraphExecDestroy(self._exec)
            self._exec = ctypes.c_void_p()
        if self._graph.value:
            _C.cudart.cudaGraphDestroy(self._graph)
            self._graph = ctypes.c_void_p()
        if self.pool_id is not None and self._capture_ended:  # as CUDAGraph::reset: only a graph captured
            _C.c10_cuda.sim_torch_release_pool(0, self.pool_id[0], self.pool_id[1])
        self.pool_id = None
        self._capture_ended = False

    def __del__(self):
        try:
            self.reset()
        except Exception:
            pass


_default_capture_stream = None


def _side_stream():
    global _default_capture_stream
    if _default_capture_stream is None:
        s = ctypes.c_void_p()
        if _C.cudart.cudaStreamCreate(ctypes.byref(s)) != 0:
            raise RuntimeError("cudaStreamCreate failed")
        _default_capture_stream = s
    return _default_capture_stream


class graph:
    def __init__(self, cuda_graph, pool=None, stream=None, capture_error_mode="global"):
        self.cuda_graph = cuda_graph
        self.pool = pool
        self.stream = stream
        self.capture_error_mode = capture_error_mode

    def __enter__(self):
        from . import _current_stream, _set_current_stream, synchronize
        from .memory import empty_cache
        synchronize()
        gc.collect()
        empty_cache()
        self._before = _current_stream()
        stream = self.stream if self.stream is not None else _side_stream()
        _set_current_stream(stream.value)  # torch.cuda.stream(capture_stream): the block's ops run on it
        self.cuda_graph.capture_begin(self.pool, self.capture_error_mode, stream)

    def __exit__(self, *exc):
        from . import _set_current_stream
        try:
            self.cuda_graph.capture_end()
        finally:
            _set_current_stream(self._before)
        return False
