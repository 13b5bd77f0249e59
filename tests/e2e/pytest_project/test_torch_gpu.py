"""The same with PyTorch (memtrace's stand-in): its tensors' peak, its cache (no leak) and a tensor kept."""

import pytest
import torch

kept = []

@pytest.mark.gpu_limit_memory("1 MiB", layer="allocated")
def test_tensors_over():
    x = torch.empty(1 << 20, device="cuda")   # 4 MiB
    del x

@pytest.mark.gpu_limit_leaks("16 MiB")
def test_cache_is_not_a_leak():
    x = torch.empty(1 << 22, device="cuda")   # 16 MiB, freed: the cache keeps its segment
    del x

@pytest.mark.gpu_limit_leaks("1 MiB")
def test_tensor_leak():
    kept.append(torch.empty(1 << 20, device="cuda"))
