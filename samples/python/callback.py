"""Python called back from C: libc's qsort (through ctypes) calls a Python comparison that
allocates, so the allocation's stack holds Python frames, the C library's frames between them,
and Python frames again. memtrace's native walk ends with the outermost Python frame: the frames
between Python ones are kept, the interpreter's start-up below the outermost is not.
  callback.py [ROUNDS]"""

import ctypes
import ctypes.util
import sys

import cuda

libc = ctypes.CDLL(ctypes.util.find_library("c"))
COMPARE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int))


def compare(a, b):
    cuda.malloc(1 << 20)  # memtrace-test: callback-alloc
    return a[0] - b[0]


def sort(values):
    array = (ctypes.c_int * len(values))(*values)
    libc.qsort(array, len(array), ctypes.sizeof(ctypes.c_int), COMPARE(compare))  # memtrace-test: callback-qsort
    return list(array)


def main(rounds):
    for _ in range(rounds):
        assert sort([2, 1]) == [1, 2]  # memtrace-test: callback-main
    cuda.malloc(2 << 20)  # memtrace-test: callback-direct


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)  # memtrace-test: callback-module
