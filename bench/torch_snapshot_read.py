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
    """Wall seconds, the completed process (its output small), and its peak memory in MiB."""
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen(command, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        done = subprocess.CompletedProcess(command, os.waitstatus_to_exitcode(status), out.read(), err.read())
    return wall, done, usage.ru_maxrss / 1024


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("memtrace")
    parser.add_argument("--allocations", type=int, default=300_000)
    parser.add_argument("--keep", help="write the snapshot here and keep it")
    parser.add_argument("--only-make", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.only_make:
        return make_snapshot(args.only_make, args.allocations)
    path = args.keep or os.path.join(tempfile.mkdtemp(prefix="memtrace-snapshot-read."), "snapshot.pickle")
    start = time.perf_counter()
    # In a process of its own: a child forked from one that holds PyTorch and its CUDA context
    # would count that memory as its own (ru_maxrss carries across exec).
    subprocess.run([sys.executable, __file__, args.memtrace, "--allocations", str(args.allocations),
                    "--only-make", path], check=True)
    size = os.path.getsize(path) / (1 << 20)
    print(f"snapshot: {size:.0f} MiB from {args.allocations} allocations in {time.perf_counter() - start:.0f} s")
    load = "import pickle, sys, time; t = time.perf_counter(); s = pickle.load(open(sys.argv[1], 'rb')); " \
           "print(time.perf_counter() - t, sum(len(d) for d in s['device_traces']))"
    ours, theirs, entries, our_mib, their_mib = [], [], 0, 0, 0
    for _ in range(3):
        wall, out, mib = timed([args.memtrace, "peak", path])
        if out.returncode != 0:
            sys.exit(f"memtrace peak failed: {out.stderr.strip()}")
        ours.append(wall)
        our_mib = max(our_mib, mib)
        _, out, mib = timed([sys.executable, "-c", load, path])
        seconds, entries = out.stdout.split()
        theirs.append(float(seconds))
        their_mib = max(their_mib, mib)
    a, b = statistics.median(ours), statistics.median(theirs)
    print(f"entries: {entries}; memtrace peak {a:.2f} s, {our_mib:.0f} MiB; pickle.load {b:.2f} s, "
          f"{their_mib:.0f} MiB: {b / a:.2f}x as fast")
    if not args.keep:
        os.remove(path)


if __name__ == "__main__":
    main()
