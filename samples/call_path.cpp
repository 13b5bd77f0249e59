// A known call path for stack tests: main -> level_one -> level_two -> allocate_buffer, which
// reaches cudaMalloc through a function inlined into it. With --depth N the path first recurses
// N times, to go past the recorded stack depth. Lines the tests look for are marked.
//   call_path [--depth N]
#include <cuda_runtime_api.h>

#include "sample_account.h"

namespace {

sample::Account account;

inline __attribute__((always_inline)) void* inlined_malloc(size_t bytes) {
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, bytes);  // memtrace-test: inlined_malloc
  account.call("cudaMalloc", e == cudaSuccess);
  return p;
}

__attribute__((noinline)) void* allocate_buffer(size_t bytes) {
  void* p = inlined_malloc(bytes);  // memtrace-test: allocate_buffer
  account.live(0, static_cast<int64_t>(bytes));
  return p;
}

__attribute__((noinline)) void* level_two(size_t bytes) {
  void* p = allocate_buffer(bytes);  // memtrace-test: level_two
  asm volatile("" ::: "memory");     // keeps the call from becoming a tail call
  return p;
}

__attribute__((noinline)) void* level_one(size_t bytes) {
  void* p = level_two(bytes);  // memtrace-test: level_one
  asm volatile("" ::: "memory");
  return p;
}

__attribute__((noinline)) void* recurse(int depth, size_t bytes) {
  void* p = depth > 0 ? recurse(depth - 1, bytes) : level_one(bytes);  // memtrace-test: recurse
  asm volatile("" ::: "memory");
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  const int depth = static_cast<int>(sample::arg_value(argc, argv, "--depth", 0));
  void* p = recurse(depth, 1 << 20);  // memtrace-test: main
  SAMPLE_CHECK(cudaFree(p));
  account.call("cudaFree", true);
  account.live(0, -(1 << 20));
  account.print();
  return 0;
}
