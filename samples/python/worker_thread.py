"""Allocations from a worker thread: one holding the GIL during the call, one releasing it. Both
carry the worker's Python frames."""

import threading

import cuda


def worker():
    held = cuda.malloc(3 << 20, hold_gil=True)  # memtrace-test: worker-gil
    released = cuda.malloc(5 << 20, hold_gil=False)  # memtrace-test: worker-nogil
    cuda.free(held)
    cuda.free(released)


def main():
    thread = threading.Thread(target=worker, name="allocator")
    thread.start()
    thread.join()
    cuda.print_account()


if __name__ == "__main__":
    main()
