"""Data-parallel training as torchrun runs it: without RANK in its environment the script starts
one worker process per rank (as torch.distributed.run does, RANK, LOCAL_RANK and WORLD_SIZE set)
and waits for them; each worker trains a two-layer model, its matmuls through cuBLAS (a handle and
a workspace per thread and stream) and its gradients all-reduced through NCCL (the communicator
made on the first collective, as ProcessGroupNCCL does). With --eval-graph, each worker also
evaluates the model through a CUDA graph captured once (torch.cuda.graph: its tensors in the
capture's private pool) and replayed after every step; with --pool-buffer MIB, it keeps a buffer of
that size in a torch.cuda.MemPool of its own. It uses only the PyTorch API that memtrace's
stand-in (sim/torch, with its NCCL and cuBLAS) has, so the same script runs on GPUs.

  ddp_train.py [--ranks N] [--steps N] [--width W] [--eval-graph] [--pool-buffer MIB]
"""

import argparse
import os
import subprocess
import sys

import torch
import torch.distributed as dist


def worker(args):
    dist.init_process_group("nccl")
    w = args.width
    model = torch.nn.Sequential(torch.nn.Linear(w, 4 * w, bias=False, device="cuda"), torch.nn.ReLU(),
                                torch.nn.Linear(4 * w, w, bias=False, device="cuda"))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    if args.pool_buffer:  # a buffer of its own pool, as symmetric-memory buffers are kept
        pool = torch.cuda.MemPool()
        with torch.cuda.use_mem_pool(pool):
            buffer = torch.empty(args.pool_buffer << 20, dtype=torch.int8, device="cuda")  # memtrace-test: pool_buffer
    if args.eval_graph:
        static_batch = torch.randn(256, w, device="cuda")
        model(static_batch)  # warm-up before the capture, as torch.cuda.graph's docs ask (cuBLAS's handle made)
        eval_graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(eval_graph):
            static_out = model(static_batch)  # memtrace-test: eval_graph
    for _ in range(args.steps):
        batch = torch.randn(64, w, device="cuda")
        loss = model(batch).sum()  # memtrace-test: forward
        loss.backward()
        for p in model.parameters():  # DistributedDataParallel's all-reduce of the gradients
            dist.all_reduce(p.grad)  # memtrace-test: all_reduce
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        del batch, loss
        if args.eval_graph:
            eval_graph.replay()
    torch.cuda.synchronize()
    os.write(1, b"ddp_train: rank %d of %d done\n" % (dist.get_rank(), dist.get_world_size()))
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--eval-graph", action="store_true")
    parser.add_argument("--pool-buffer", type=int, default=0, metavar="MIB")
    args = parser.parse_args()
    if "RANK" in os.environ:
        worker(args)
        return
    workers = [subprocess.Popen([sys.executable] + sys.argv,
                                env={**os.environ, "RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": str(args.ranks)})
               for r in range(args.ranks)]
    sys.exit(max(w.wait() for w in workers))


if __name__ == "__main__":
    main()
