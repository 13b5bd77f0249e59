"""cuBLAS handles and workspaces, as aten/src/ATen/cuda/CublasHandlePool.cpp (2.4 on) makes them:
getCurrentCUDABlasHandle takes a handle per thread and device from its pool (cublasCreate on the
first), sets the current stream, and gives each (handle, stream) pair a workspace of its own from
the caching allocator (getNewWorkspace -> CUDACachingAllocator::get()->allocate), sized by
getChosenWorkspaceSize; it is never freed (clearCublasWorkspaces aside)."""

import ctypes
import os
import re
import threading

from . import _nvidia, cuda

_local = threading.local()
_workspaces = {}  # (handle, stream) -> the workspace's pointer, kept for the process's life


def _cublas():
    lib = _nvidia.library("cublas", "libcublas.so.13")
    lib.cublasCreate_v2.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    lib.cublasSetStream_v2.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.cublasSetWorkspace_v2.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    return lib


def workspace_size(device):
    """getChosenWorkspaceSize / parseChosenWorkspaceSize: CUBLAS_WORKSPACE_CONFIG's ":SIZE_KiB:COUNT"
    pairs summed; by default ":4096:2:16:8" (8,519,680 B), and 4096 KiB x 8 (32 MiB) on sm 9.0."""
    config = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    if config is None:
        major, minor = ctypes.c_int(), ctypes.c_int()
        cuda._C.cudart.cudaDeviceGetAttribute(ctypes.byref(major), 75, device)  # ComputeCapabilityMajor
        cuda._C.cudart.cudaDeviceGetAttribute(ctypes.byref(minor), 76, device)  # ComputeCapabilityMinor
        config = ":4096:8" if (major.value, minor.value) == (9, 0) else ":4096:2:16:8"
    pairs = re.findall(r":([0-9]+):([0-9]+)", config)
    return sum(int(size) * 1024 * int(count) for size, count in pairs) if pairs else 4096 * 1024 * 2 + 16 * 1024 * 8


def current_handle(device):
    """getCurrentCUDABlasHandle, on the current stream (the default one, or a graph's capture stream)."""
    handles = getattr(_local, "handles", None)
    if handles is None:
        handles = _local.handles = {}
    lib = _cublas()
    if device not in handles:
        handle = ctypes.c_void_p()
        if lib.cublasCreate_v2(ctypes.byref(handle)) != 0:
            raise RuntimeError("CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling `cublasCreate(handle)`")
        handles[device] = handle.value
    handle, stream = handles[device], cuda._current_stream()
    lib.cublasSetStream_v2(handle, stream)
    if (handle, stream) not in _workspaces:
        size = workspace_size(device)
        _workspaces[(handle, stream)] = cuda._malloc(size, device)
    lib.cublasSetWorkspace_v2(handle, _workspaces[(handle, stream)], workspace_size(device))
    return handle
