"""memtrace.record() around a PyTorch training loop, the model and optimizer made before it: the
tensors of the loop, its steps, and a tensor kept every step (a leak), recorded from inside.
Uses only the PyTorch API memtrace's stand-in (sim/torch) has.
  torch_record.py OUT
"""

import sys

import torch

import memtrace

w = 256
model = torch.nn.Sequential(torch.nn.Linear(w, 4 * w, bias=False, device="cuda"), torch.nn.ReLU(),
                            torch.nn.Linear(4 * w, w, bias=False, device="cuda"))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
with memtrace.record(sys.argv[1]):
    kept = []
    for _ in range(4):
        batch = torch.randn(64, w, device="cuda")
        loss = model(batch).sum()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        kept.append(torch.empty(256 * 1024, device="cuda"))  # memtrace-test: leak
print("recorded")
