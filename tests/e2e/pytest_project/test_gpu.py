"""Tests a user would hold to GPU memory limits with memtrace's pytest plugin (pytest_plugin_test.cpp
runs them): within a limit, over it, a leak, and a test that fails on its own."""

import pytest
import cuda

MiB = 1 << 20
kept = []

@pytest.mark.gpu_limit_memory("64 MiB")
def test_within_limit():
    a = cuda.malloc(32 * MiB)
    cuda.free(a)

@pytest.mark.gpu_limit_memory("16 MiB")
def test_over_limit():
    a = cuda.malloc(24 * MiB)
    b = cuda.malloc(8 * MiB)
    cuda.free(a)
    cuda.free(b)

@pytest.mark.gpu_limit_leaks("1 MiB")
def test_leaks():
    kept.append(cuda.malloc(4 * MiB))

@pytest.mark.gpu_limit_leaks("1 MiB")
def test_raises():
    kept.append(cuda.malloc(4 * MiB))
    raise ValueError("its own failure")
