"""Activations that grow each step (a sequence length that grows, as in curriculum training or
serving longer prompts): the pattern that strands cached segments under PyTorch's default
allocator, each step's larger block fitting in none of the last, and that expandable segments serve
by growing one segment. `memtrace whatif` on a run with the defaults predicts the run with
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; the tests hold the two against each other."""

import argparse

import torch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=12)
    args = parser.parse_args()
    weights = torch.empty(24 << 20, dtype=torch.uint8, device="cuda")
    for step in range(args.steps):
        n = (12 + 3 * step) << 20
        hidden = torch.empty(n, dtype=torch.uint8, device="cuda")
        scores = torch.empty(n // 3, dtype=torch.uint8, device="cuda")  # memtrace-test: scores
        del hidden, scores
    print(f"reserved peak {torch.cuda.max_memory_reserved()} bytes, weights {weights.numel()} bytes")


if __name__ == "__main__":
    main()
