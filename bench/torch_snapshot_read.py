"""A real PyTorch memory snapshot read by memtrace, against Python's own pickle.load of it.

Needs a GPU and PyTorch (bench row 10 reads a snapshot memtrace exported; this one is PyTorch's
own: every dict and list memoized, each entry's frames a new list). Records a training-like loop
with torch.cuda.memory._record_memory_history (PyTorch's defaults: Python and C++ frames), dumps
the snapshot, then times `memtrace peak` and `pickle.load` of it, alternately, medians of 3.
(bench/as_torch_pickles.py makes the same shape without a GPU, for bench row 10b.)

    python3 bench/torch_snapshot_read.py MEMTRACE [--allocations N] [--keep FILE]
"""
import argparse
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time


def make_snapshot(path, allocations):
    """Steps of a training-like loop: each allocates through a few layers of Python (several call
    sites, so several stacks), keeps its tensors to the step's end and lets them go, so that every
    step reaches the same peak, as training does once it is warm."""
    import torch

    torch.cuda.memory._record_memory_history(max_entries=4 * allocations)

    def linear(i):
        return torch.empty(4096 * (1 + i % 61), device="cuda")

    def attention(i):
        return linear(i) if i % 2 else torch.empty(8192 * (1 + i % 13), device="cuda")

    def block(i):
        return attention(i) if i % 3 else linear(i)

    per_step = 300
    for step in range(allocations // per_step):
        kept = [block(i) for i in range(per_step)]
        del kept
    torch.cuda.synchronize()
    torch.cuda.memory._dump_snapshot(path)
    torch.cuda.memory._record_memory_history(enabled=None)


def timed(command):
    start = time.perf_counter()
    out = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return time.perf_counter() - start, out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("memtrace")
    parser.add_argument("--allocations", type=int, default=300_000)
    parser.add_argument("--keep", help="write the snapshot here and keep it")
    args = parser.parse_args()
    path = args.keep or os.path.join(tempfile.mkdtemp(prefix="memtrace-snapshot-read."), "snapshot.pickle")
    start = time.perf_counter()
    make_snapshot(path, args.allocations)
    size = os.path.getsize(path) / (1 << 20)
    print(f"snapshot: {size:.0f} MiB from {args.allocations} allocations in {time.perf_counter() - start:.0f} s")
    load = "import pickle, sys, time; t = time.perf_counter(); s = pickle.load(open(sys.argv[1], 'rb')); " \
           "print(time.perf_counter() - t, sum(len(d) for d in s['device_traces']))"
    ours, theirs, entries = [], [], 0
    for _ in range(3):
        wall, out = timed([args.memtrace, "peak", path])
        if out.returncode != 0:
            sys.exit(f"memtrace peak failed: {out.stderr.strip()}")
        ours.append(wall)
        _, out = timed([sys.executable, "-c", load, path])
        seconds, entries = out.stdout.split()
        theirs.append(float(seconds))
    a, b = statistics.median(ours), statistics.median(theirs)
    print(f"entries: {entries}; memtrace peak {a:.2f} s, pickle.load {b:.2f} s: {b / a:.2f}x as fast")
    if not args.keep:
        os.remove(path)


if __name__ == "__main__":
    main()
