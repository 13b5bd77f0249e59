"""A training loop measured twice: its steps' median time before memtrace attach joins it, and after
memtrace has left (memtrace detach), so that what attaching leaves behind (the injector loaded, its
Python hooks and PyTorch's tracker silent) shows as a ratio. The suite runs it on the stand-in
PyTorch, once attached between the two phases and once not.

  attach_residue.py GO [--steps N]

Prints "before MS" after the first phase, waits until the file GO exists, then prints "after MS"."""

import argparse
import os
import statistics
import sys
import time

import torch


def phase(model, optimizer, steps, width):
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        batch = torch.randn(64, width, device="cuda")
        loss = model(batch).sum()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("go")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--width", type=int, default=256)
    args = parser.parse_args()
    w = args.width
    model = torch.nn.Sequential(torch.nn.Linear(w, 4 * w, bias=False, device="cuda"), torch.nn.ReLU(),
                                torch.nn.Linear(4 * w, w, bias=False, device="cuda"))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    phase(model, optimizer, args.steps // 4, w)  # warm up: the allocator's cache, the optimizer's state
    print("before %.4f pid %d" % (phase(model, optimizer, args.steps, w), os.getpid()), flush=True)
    while not os.path.exists(args.go):
        time.sleep(0.01)
    print("after %.4f" % phase(model, optimizer, args.steps, w), flush=True)


if __name__ == "__main__":
    sys.exit(main())
