"""A program of the shape most have: every GPU allocation through one helper of its own
(device_alloc), called from loading the weights, the forward and backward passes, and a loader
thread; and log_metrics keeping 2 MiB every step (a leak). Steps marked with memtrace.step().
  helper_alloc.py [STEPS]
"""

import ctypes
import sys
import threading

import cuda
import memtrace

MiB = 1 << 20
kept_metrics = []


def device_alloc(nbytes):
    """The program's one way to the GPU: ctypes on the runtime, the GIL released around the call."""
    ptr = ctypes.c_void_p()
    if cuda._runtime_nogil.cudaMalloc(ctypes.byref(ptr), nbytes) != 0:  # memtrace-test: device_alloc
        raise MemoryError(nbytes)
    cuda.count("cudaMalloc", nbytes)
    return ptr.value, nbytes


def load_weights():
    weights = []
    for _ in range(4):
        weights.append(device_alloc(16 * MiB))  # memtrace-test: load_weights
    return weights


def forward():
    activations = []
    for _ in range(3):
        activations.append(device_alloc(4 * MiB))  # memtrace-test: forward
    return activations


def backward(activations):
    grads = []
    for _ in activations:
        grads.append(device_alloc(2 * MiB))  # memtrace-test: backward
    for buffer in activations + grads:
        cuda.free(buffer)


def log_metrics():
    kept_metrics.append(device_alloc(2 * MiB))  # memtrace-test: log_metrics


def loader(batches):
    batches.append(device_alloc(1 * MiB))  # memtrace-test: loader


def main(steps):
    weights = load_weights()
    for _ in range(steps):
        memtrace.step()
        batches = []
        thread = threading.Thread(target=loader, args=(batches,))
        thread.start()
        thread.join()
        backward(forward())
        log_metrics()
        for batch in batches:
            cuda.free(batch)
    cuda.print_account()
    return weights


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10)
