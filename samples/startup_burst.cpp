// A training job's first iteration, as one of several ranks starting at once: --allocations N
// (default 20000) allocations and frees, each 30 frames deep through the C library (qsort calls
// back into the program, which allocates) on a thread of its own (as PyTorch's backward pass
// allocates: the stack passes through libstdc++), so the collector meets new stacks and libraries
// all at once. Times every call itself and prints the longest: what recording made it wait.
//   startup_burst [--allocations N]
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "sample_account.h"

namespace {

sample::Account account;
long g_remaining = 0;
long long g_longest_ns = 0;

__attribute__((noinline)) void allocate_timed() {
  auto start = std::chrono::steady_clock::now();
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, 1 << 16);
  if (e == cudaSuccess) e = cudaFree(p);
  long long ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
  if (ns > g_longest_ns) g_longest_ns = ns;
  account.call("cudaMalloc", e == cudaSuccess);
  account.call("cudaFree", e == cudaSuccess);
  account.live(0, 1 << 16);
  account.live(0, -(1 << 16));
}

__attribute__((noinline)) void descend(int depth) {
  if (depth > 0) {
    descend(depth - 1);
    asm volatile("" ::: "memory");  // a frame per level
    return;
  }
  allocate_timed();
}

// qsort's comparisons: each one allocates from a different depth until the budget is spent.
int compare(const void* a, const void* b) {
  int x = *static_cast<const int*>(a), y = *static_cast<const int*>(b);
  if (g_remaining > 0) {
    --g_remaining;
    descend(20 + (x + y) % 8);
  }
  return (x > y) - (x < y);
}

}  // namespace

int main(int argc, char** argv) {
  g_remaining = sample::arg_value(argc, argv, "--allocations", 20000);
  std::thread iteration([] {
    while (g_remaining > 0) {
      int values[512];
      for (int i = 0; i < 512; ++i) values[i] = (i * 7919) % 512;
      std::qsort(values, 512, sizeof values[0], compare);
    }
  });
  iteration.join();
  std::printf("longest call %lld ns\n", g_longest_ns);
  std::fflush(stdout);
  account.print();
  return 0;
}
