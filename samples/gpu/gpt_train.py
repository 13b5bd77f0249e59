"""A small GPT-like model, built from a config with random weights (nothing downloaded), trained a
few steps with AdamW on random tokens: the GPU check's workload. Prints PyTorch's own figures and
the time per step as the sample's account (`memtrace-sample: {...}`).

  gpt_train.py [--steps N] [--layers L] [--width D] [--heads H] [--seq S] [--batch B]
               [--leak] [--oom] [--until FILE]

--until FILE trains until FILE exists (a job memtrace attach joins while it runs), printing
"gpt_train: ready pid P" once the first step is done.
"""

import argparse
import json
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)
        self.heads = heads

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)  # memtrace-test: attention
        att = att.masked_fill(torch.ones(s, s, device=x.device, dtype=torch.bool).triu(1), float("-inf"))
        y = (F.softmax(att, dim=-1) @ v).transpose(1, 2).reshape(b, s, d)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab, seq, d, layers, heads):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--width", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--vocab", type=int, default=16384)
    p.add_argument("--leak", action="store_true")
    p.add_argument("--oom", action="store_true")
    p.add_argument("--until")
    a = p.parse_args()
    torch.manual_seed(0)
    model = GPT(a.vocab, a.seq, a.width, a.layers, a.heads).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    kept, times = [], []
    step = 0
    while (not os.path.exists(a.until)) if a.until else step < a.steps:
        step += 1
        torch.cuda.synchronize()
        start = time.perf_counter()
        tokens = torch.randint(0, a.vocab, (a.batch, a.seq + 1), device="cuda")
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, a.vocab), tokens[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if a.leak:
            kept.append(torch.empty(1 << 20, device="cuda"))  # memtrace-test: leak
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        del tokens, logits, loss
        if a.until and step == 1:
            os.write(1, b"gpt_train: ready pid %d\n" % os.getpid())
    oom = False
    if a.oom:
        total = torch.cuda.get_device_properties(0).total_memory
        try:
            torch.empty(total, dtype=torch.uint8, device="cuda")  # memtrace-test: oom
        except torch.cuda.OutOfMemoryError:
            oom = True
    stats = torch.cuda.memory_stats()
    steady = times[2:] or times  # the first steps warm up (cuBLAS handles, the allocator's cache)
    line = "memtrace-sample: " + json.dumps({
        "pid": os.getpid(),
        "torch": torch.__version__,
        "max_memory_allocated": torch.cuda.max_memory_allocated(),
        "max_memory_reserved": torch.cuda.max_memory_reserved(),
        "max_memory_requested": stats.get("requested_bytes.all.peak", 0),
        "segments_allocated": stats.get("segment.all.allocated", 0),
        "segments_freed": stats.get("segment.all.freed", 0),
        "num_ooms": stats.get("num_ooms", 0),
        "step_ms": 1000 * sorted(steady)[len(steady) // 2],
        "oom_caught": oom}) + "\n"
    os.write(1, line.encode())


if __name__ == "__main__":
    main()
