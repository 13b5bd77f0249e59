"""A ctypes.CDLL subclass that skips the base __init__ and borrows another library's handle, as
some CUDA wrappers do. Calls through it must work under memtrace as they do without it."""

import ctypes

import cuda


class BorrowedRuntime(ctypes.CDLL):
    def __init__(self, other):  # no CDLL.__init__: the attributes are taken from OTHER
        self._name = other._name
        self._handle = other._handle
        self._FuncPtr = other._FuncPtr


if __name__ == "__main__":
    runtime = BorrowedRuntime(ctypes.CDLL("libcudart.so.13"))
    runtime.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    runtime.cudaFree.argtypes = [ctypes.c_void_p]
    ptr = ctypes.c_void_p()
    err = runtime.cudaMalloc(ctypes.byref(ptr), 1 << 20)  # memtrace-test: subclass-malloc
    print(f"cudaMalloc through the subclass: {err}", flush=True)
    err_free = runtime.cudaFree(ptr)
    cuda.count("cudaMalloc", 1 << 20)
    cuda.count("cudaFree", -(1 << 20))
    cuda.print_account()
    raise SystemExit(0 if err == 0 and err_free == 0 else 1)
