"""Tensor allocations through PyTorch's caching allocator, as a training step makes them: each
one a block handed out from a segment the allocator already holds (no CUDA call), which memtrace
records through PyTorch's trace tracker (the allocated layer). Prints the cost of one tensor
allocated and freed, in ns, 15 Python frames deep.

  torch_tensor_bench.py N
"""

import json
import sys
import time

import torch


def at_depth(depth, work):
    return at_depth(depth - 1, work) if depth > 1 else work()


def main():
    count = int(sys.argv[1])
    sizes = [4096 * (1 + i % 13) for i in range(64)]  # what the caching allocator rounds, in floats
    kept = [torch.empty(s, device="cuda") for s in sizes]  # the segments, before timing
    del kept

    def loop():
        start = time.perf_counter()
        for i in range(count):
            t = torch.empty(sizes[i & 63], device="cuda")
            del t
        return time.perf_counter() - start

    seconds = at_depth(15, loop)
    print(json.dumps({"ns_per_tensor": seconds * 1e9 / count}))


if __name__ == "__main__":
    main()
