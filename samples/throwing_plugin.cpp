// C++ exceptions inside a library that a Python program loads, as PyTorch's (its out-of-memory
// error is one): allocate, throw through two frames, catch, free. The exception must be raised and
// caught by the toolchain's own unwinder (libgcc_s), whatever memtrace preloads.
#include <cuda_runtime_api.h>

#include <stdexcept>

namespace {

__attribute__((noinline)) void check(cudaError_t e, int round) {
  if (e != cudaSuccess) throw std::runtime_error("cudaMalloc failed");
  if (round % 2 == 0) throw std::out_of_range("even round");
}

__attribute__((noinline)) void allocate_and_throw(void** p, int round) {
  check(cudaMalloc(p, 1 << 20), round);
  asm volatile("" ::: "memory");
}

}  // namespace

// ROUNDS allocations; returns how many exceptions were caught (ROUNDS / 2 rounded up), or -1 if a
// call failed.
extern "C" int throw_and_catch(int rounds) {
  int caught = 0;
  for (int round = 0; round < rounds; ++round) {
    void* p = nullptr;
    try {
      allocate_and_throw(&p, round);
    } catch (const std::out_of_range&) {
      ++caught;
    } catch (const std::exception&) {
      return -1;
    }
    if (cudaFree(p) != cudaSuccess) return -1;
  }
  return caught;
}
