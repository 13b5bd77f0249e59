"""C++ exceptions thrown and caught inside a library this program loads with ctypes (its path is
the first argument), as PyTorch's are: 10 rounds of allocate, throw, catch, free."""

import ctypes
import sys

import cuda

if __name__ == "__main__":
    plugin = ctypes.CDLL(sys.argv[1])
    caught = plugin.throw_and_catch(10)
    print(f"caught {caught} exceptions", flush=True)
    for _ in range(10):  # what the library did
        cuda.count("cudaMalloc", 1 << 20)
        cuda.count("cudaFree", -(1 << 20))
    cuda.print_account()
    sys.exit(0 if caught == 5 else 1)
