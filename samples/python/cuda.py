"""The few CUDA runtime calls the Python samples make, through ctypes on libcudart.so.13, and
the account every sample keeps of itself (printed as `memtrace-sample: {...}` at exit).

CDLL releases the GIL around each call, as PyTorch does around every op (the default); PyDLL
keeps it.
"""

import ctypes
import json
import os

_runtime = ctypes.PyDLL("libcudart.so.13")
_runtime_nogil = ctypes.CDLL("libcudart.so.13")
for _lib in (_runtime, _runtime_nogil):
    _lib.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    _lib.cudaMalloc.restype = ctypes.c_int
    _lib.cudaFree.argtypes = [ctypes.c_void_p]
    _lib.cudaFree.restype = ctypes.c_int

calls = {}
live = 0
peak = 0


def count(api, nbytes):
    global live, peak
    calls[api] = calls.get(api, 0) + 1
    live += nbytes
    peak = max(peak, live)


def malloc(nbytes, hold_gil=False):
    ptr = ctypes.c_void_p()
    lib = _runtime if hold_gil else _runtime_nogil
    err = lib.cudaMalloc(ctypes.byref(ptr), nbytes)  # memtrace-test: cudaMalloc
    if err != 0:
        raise MemoryError(f"cudaMalloc failed with error {err}")
    count("cudaMalloc", nbytes)
    return ptr.value, nbytes


def free(buffer):
    ptr, nbytes = buffer
    err = _runtime_nogil.cudaFree(ctypes.c_void_p(ptr))
    if err != 0:
        raise RuntimeError(f"cudaFree failed with error {err}")
    count("cudaFree", -nbytes)


def print_account():
    line = "memtrace-sample: " + json.dumps({
        "pid": os.getpid(), "calls": calls, "failed": {},
        "peak_bytes": {"0": peak}, "live_at_exit_bytes": {"0": live}}) + "\n"
    # One write, so that the lines of processes printing at once never interleave.
    os.write(1, line.encode())
