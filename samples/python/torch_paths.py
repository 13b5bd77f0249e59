"""The paths of PyTorch that a simple training loop does not take, one per flag, each with a few
optimizer steps: gradients without storage of their own (nn.Embedding(sparse=True)'s, FSDP2's
DTensor parameters), the program resetting PyTorch's peaks, tensors from a torch.cuda.MemPool
with an allocator of its own, a step compiled with torch.compile, a tensor allocated holding the
GIL (as a C++ extension's function does). It prints PyTorch's figures as the sample's account.

  torch_paths.py [--steps N] [--sparse] [--fsdp] [--reset-peaks] [--mempool LIBRARY]
                 [--compile] [--holding-gil]

--fsdp, --holding-gil and the compile account use what memtrace's stand-in PyTorch
(sim/torch) offers in place of a process group and a built extension.
"""

import argparse
import json
import os
import sys

import torch


def account(**extra):
    stats = torch.cuda.memory_stats()
    line = {"pid": os.getpid(),
            "max_memory_requested": stats.get("requested_bytes.all.peak", 0),
            "max_memory_allocated": stats.get("allocated_bytes.all.peak", 0),
            "max_memory_reserved": stats.get("reserved_bytes.all.peak", 0)}
    line.update(extra)
    os.write(1, ("memtrace-sample: " + json.dumps(line) + "\n").encode())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--sparse", action="store_true")
    parser.add_argument("--fsdp", action="store_true")
    parser.add_argument("--reset-peaks", action="store_true")
    parser.add_argument("--mempool")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--holding-gil", action="store_true")
    args = parser.parse_args()
    w = 256
    kept = []
    if args.mempool:  # the first tensors come from a pool whose allocator pre-reserved its memory
        allocator = torch.cuda.memory.CUDAPluggableAllocator(args.mempool, "arena_alloc", "arena_free")
        pool = torch.cuda.MemPool(allocator.allocator())
        with torch.cuda.use_mem_pool(pool):
            kept.append(torch.empty(1 << 20, device="cuda"))  # memtrace-test: pool
            del_later = torch.empty(6 << 20, device="cuda")  # a segment of its own
        del del_later
        torch.cuda.empty_cache()  # the pool is released: its free segment goes back to its allocator
    if args.sparse:
        model = torch.nn.Embedding(1000, w, sparse=True, device="cuda")
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    else:
        model = torch.nn.Sequential(torch.nn.Linear(w, 4 * w, bias=False, device="cuda"), torch.nn.ReLU(),
                                    torch.nn.Linear(4 * w, w, bias=False, device="cuda"))
        optimizer = None
    if args.fsdp:
        from torch.distributed.fsdp import fully_shard
        fully_shard(model)
    if optimizer is None:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step():
        batch = torch.empty(64, device="cuda", dtype=torch.int64) if args.sparse else torch.randn(64, w, device="cuda")
        loss = model(batch).sum()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def forward_only(x):
        return model(x).sum()

    if args.compile:
        step = torch.compile(step)
        forward_only = torch.compile(forward_only, fullgraph=True)
    for n in range(args.steps):
        step()
        if args.holding_gil:
            from torch import _sim_extension
            kept.append(_sim_extension.empty_holding_gil(3 << 16))  # memtrace-test: extension
        if args.reset_peaks and n == 0:
            torch.cuda.reset_peak_memory_stats()
    extra = {}
    if args.compile:
        forward_only(torch.randn(64, w, device="cuda"))
        dynamo = sys.modules.get("torch._dynamo")
        traced = getattr(dynamo, "traced_files", {})
        extra = {"graph_breaks": getattr(dynamo, "graph_breaks", None),
                 "traced_memtrace_frames": sum(n for f, n in traced.items() if "_memtrace_shim" in f)}
    account(steps=args.steps, **extra)


if __name__ == "__main__":
    main()
