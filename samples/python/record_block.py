"""memtrace.record() inside a program: allocations before the block, inside it (from a function and
from a worker thread, the GIL released around each call as PyTorch does), and after it. Prints the
account of the block alone (`memtrace-sample: {...}`), and what memtrace.snapshot() wrote.
  record_block.py OUT [--twice] [--die-inside] [--fork-inside]
"""

import json
import os
import signal
import sys
import threading

import cuda
import memtrace

MiB = 1 << 20


def load_weights():
    return [cuda.malloc(4 * MiB) for _ in range(3)]  # memtrace-test: load_weights


def step(weights):
    activations = [cuda.malloc(2 * MiB) for _ in range(4)]  # memtrace-test: step
    for a in activations:
        cuda.free(a)


def loader(kept):
    kept.append(cuda.malloc(1 * MiB))  # memtrace-test: loader


def main():
    out = sys.argv[1]
    before = [cuda.malloc(8 * MiB) for _ in range(2)]  # not recorded
    before_calls = dict(cuda.calls)
    cuda.peak = cuda.live = 0  # the block's own account from here
    with memtrace.record(out) as recording:
        weights = load_weights()
        if "--fork-inside" in sys.argv:  # a child that ends normally (its atexit handlers run)
            child = os.fork()
            if child == 0:
                sys.exit(0)
            os.waitpid(child, 0)
        for _ in range(3):
            step(weights)
        kept = []
        thread = threading.Thread(target=loader, args=(kept,))
        thread.start()
        thread.join()
        cuda.free(before[0])  # made before the block: its free is recorded, its allocation is not
        snapshot = memtrace.snapshot()
        if "--die-inside" in sys.argv:
            print("dying", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
    inside = {api: n - before_calls.get(api, 0) for api, n in cuda.calls.items()}
    peak_inside = cuda.peak
    live_inside = cuda.live + 8 * MiB  # the block's own allocations still live (it freed one from before)
    cuda.free(cuda.malloc(16 * MiB))  # after: not recorded
    if "--twice" in sys.argv:
        try:
            memtrace.start(out + "-again")
        except memtrace.MemtraceError as e:
            print("second start refused:", e)
    print("memtrace-sample:", json.dumps({"pid": os.getpid(), "calls": inside, "peak_bytes": peak_inside,
                                         "live_bytes": live_inside, "folder": recording.folder,
                                         "snapshot": snapshot}), flush=True)


if __name__ == "__main__":
    main()
