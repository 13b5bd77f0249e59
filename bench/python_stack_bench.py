"""The cost of one recorded allocation made 15 Python frames deep, through ctypes: holding the
GIL (ctypes.PyDLL) or releasing it (ctypes.CDLL, as PyTorch does around every op).
Prints nanoseconds per call as JSON.
  python_stack_bench.py [CALLS] [held|released]"""

import ctypes
import json
import sys
import time

held = len(sys.argv) < 3 or sys.argv[2] != "released"
runtime = (ctypes.PyDLL if held else ctypes.CDLL)("libcudart.so.13")
runtime.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
ptr = ctypes.c_void_p()
runtime.cudaFree(None)  # the usual way to start CUDA: the driver is ready before the first allocation


def allocate(n):
    malloc, ref = runtime.cudaMalloc, ctypes.byref(ptr)
    start = time.perf_counter_ns()
    for _ in range(n):
        malloc(ref, 0)
    return (time.perf_counter_ns() - start) / n


def at_depth(depth, n):
    return at_depth(depth - 1, n) if depth > 1 else allocate(n)


if __name__ == "__main__":
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 200000
    allocate(1000)
    best = min(at_depth(15, calls) for _ in range(3))
    print(json.dumps({"ns_per_allocation": best}))
