// A leak: every iteration keeps a small statistics buffer it never frees, in a function named
// for it. What is live at exit is exactly the leaked bytes.
//   leak [--iterations N]
#include <cuda_runtime_api.h>

#include "sample_account.h"

namespace {

sample::Account account;
constexpr size_t kBatchBytes = 8 << 20;
constexpr size_t kStatsBytes = 64 << 10;

void* alloc(size_t bytes) {
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, bytes);
  account.call("cudaMalloc", e == cudaSuccess);
  SAMPLE_CHECK(e);
  account.live(0, static_cast<int64_t>(bytes));
  return p;
}

__attribute__((noinline)) void accumulate_stats() {
  (void)alloc(kStatsBytes);  // the leak: nobody keeps the pointer
}

void process_batch() {
  void* batch = alloc(kBatchBytes);
  accumulate_stats();
  cudaError_t e = cudaFree(batch);
  account.call("cudaFree", e == cudaSuccess);
  SAMPLE_CHECK(e);
  account.live(0, -static_cast<int64_t>(kBatchBytes));
}

}  // namespace

int main(int argc, char** argv) {
  const long iterations = sample::arg_value(argc, argv, "--iterations", 50);
  for (long i = 0; i < iterations; ++i) process_batch();
  account.print();
  return 0;
}
