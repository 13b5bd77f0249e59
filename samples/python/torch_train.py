"""A PyTorch training loop: a two-layer model trained with AdamW, its parameters, gradients,
optimizer state and activations on the GPU; optionally a tensor kept every step (a leak) and a
request larger than the GPU at the end (an out-of-memory). It prints PyTorch's own figures as the
sample's account. It uses only the PyTorch API that memtrace's stand-in (sim/torch) has, so
the same script runs on a GPU with PyTorch and on the simulated device.

  torch_train.py [--steps N] [--leak] [--oom] [--width W] [--until FILE] [--threads T]

--until FILE trains until FILE exists (a job memtrace attach joins while it runs), printing
"torch_train: ready pid P" once the first step is done, and at the end whether the PyTorch
functions memtrace replaces while attached (autograd.backward, reset_peak_memory_stats) are PyTorch's
own again; --threads T runs T threads that allocate and free tensors meanwhile, as a data
loader's pinning thread would.
"""

import argparse
import json
import os
import threading
import time

import torch


def account(oom, times):
    try:
        stats = torch.cuda.memory_stats()
    except RuntimeError:  # a pluggable allocator keeps no statistics
        stats = {}
    line = "memtrace-sample: " + json.dumps({
        "pid": os.getpid(),
        "max_memory_allocated": stats.get("allocated_bytes.all.peak", 0),
        "max_memory_reserved": stats.get("reserved_bytes.all.peak", 0),
        "memory_allocated": stats.get("allocated_bytes.all.current", 0),
        "memory_reserved": stats.get("reserved_bytes.all.current", 0),
        "max_memory_requested": stats.get("requested_bytes.all.peak", 0),
        "memory_requested": stats.get("requested_bytes.all.current", 0),
        "segments_allocated": stats.get("segment.all.allocated", 0),
        "num_ooms": stats.get("num_ooms", 0),
        "step_ms": 1000 * sorted(times)[len(times) // 2] if times else 0,
        "oom_caught": oom}) + "\n"
    os.write(1, line.encode())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--leak", action="store_true")
    parser.add_argument("--oom", action="store_true")
    parser.add_argument("--until")
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args()
    own = torch.autograd.backward, torch.cuda.reset_peak_memory_stats
    stop = threading.Event()

    def loader():
        while not stop.is_set():
            staged = torch.empty(16 * 1024, device="cuda")  # memtrace-test: loader
            del staged
            time.sleep(0.001)

    threads = [threading.Thread(target=loader) for _ in range(args.threads)]
    for t in threads:
        t.start()
    w = args.width
    model = torch.nn.Sequential(torch.nn.Linear(w, 4 * w, bias=False, device="cuda"), torch.nn.ReLU(),
                                torch.nn.Linear(4 * w, w, bias=False, device="cuda"))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    kept, times = [], []
    step = 0
    while (not os.path.exists(args.until)) if args.until else step < args.steps:
        step += 1
        start = time.perf_counter()
        batch = torch.randn(64, w, device="cuda")  # memtrace-test: input
        loss = model(batch).sum()  # memtrace-test: forward
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if args.leak:
            kept.append(torch.empty(256 * 1024, device="cuda"))  # memtrace-test: leak
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        del batch, loss
        if args.until and step == 1:
            os.write(1, b"torch_train: ready pid %d\n" % os.getpid())
        if args.until:
            time.sleep(0.005)
    stop.set()
    for t in threads:
        t.join()
    if args.until:
        same = (torch.autograd.backward, torch.cuda.reset_peak_memory_stats) == own
        os.write(1, b"torch_train: PyTorch's functions as they were: %s\n" % (b"yes" if same else b"no"))
    oom = False
    if args.oom:
        try:
            torch.empty(1 << 40, device="cuda")  # memtrace-test: oom
        except torch.cuda.OutOfMemoryError:
            oom = True
    account(oom, times)


if __name__ == "__main__":
    main()
