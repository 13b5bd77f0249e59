"""A leak in a named function: every batch keeps a small buffer nobody frees. The allocations
release the GIL, as PyTorch's do.
  leak.py [BATCHES]   (default 20)"""

import sys

import cuda

KiB = 1 << 10
leaked = []


def accumulate_stats():
    leaked.append(cuda.malloc(64 * KiB))  # memtrace-test: leak


def process_batch():
    batch = cuda.malloc(1 << 20)
    accumulate_stats()
    cuda.free(batch)


def main(batches=20):
    for _ in range(batches):
        process_batch()
    cuda.print_account()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20)
