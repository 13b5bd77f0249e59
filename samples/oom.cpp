// Out of memory: allocates ever more until the device refuses, reports it as PyTorch would, and
// dies with exit status 1 holding everything it got.
//   oom [--chunk-mib M] [--recover] [--kill-after-oom]
// --recover: after the first failure, frees half of what it holds and goes on, to fail again.
// --kill-after-oom: dies of SIGKILL right after the first failure.
// At each failure it prints what it knew then:
//   memtrace-sample-oom: {"n":..,"live_bytes":..,"free_bytes":..,"total_bytes":..}
#include <cuda_runtime_api.h>

#include <csignal>
#include <cstdio>
#include <string>
#include <vector>

#include "sample_account.h"

namespace {

sample::Account account;
std::vector<void*> held;
int64_t live = 0;

void report_failure(int n, size_t chunk) {
  size_t free_bytes = 0, total = 0;
  cudaMemGetInfo(&free_bytes, &total);
  std::fprintf(stderr, "CUDA out of memory. Tried to allocate %zu MiB; %zu MiB free of %zu MiB\n", chunk >> 20,
               free_bytes >> 20, total >> 20);
  std::printf("memtrace-sample-oom: {\"n\":%d,\"live_bytes\":%lld,\"free_bytes\":%zu,\"total_bytes\":%zu}\n", n,
              static_cast<long long>(live), free_bytes, total);
  std::fflush(stdout);
}

// Allocates until the device says no; returns after the failure.
void fill(size_t chunk) {
  for (;;) {
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, chunk);  // memtrace-test: oom
    account.call("cudaMalloc", e == cudaSuccess);
    if (e == cudaErrorMemoryAllocation) return;
    SAMPLE_CHECK(e);
    held.push_back(p);
    live += static_cast<int64_t>(chunk);
    account.live(0, static_cast<int64_t>(chunk));
  }
}

}  // namespace

int main(int argc, char** argv) {
  const size_t chunk = static_cast<size_t>(sample::arg_value(argc, argv, "--chunk-mib", 1024)) << 20;
  bool recover = false, kill_after = false;
  for (int i = 1; i < argc; ++i) {
    recover |= std::string(argv[i]) == "--recover";
    kill_after |= std::string(argv[i]) == "--kill-after-oom";
  }
  fill(chunk);
  if (kill_after) {
    account.print();
    std::raise(SIGKILL);
  }
  report_failure(1, chunk);
  if (recover) {
    for (size_t i = 0; i < held.size() / 2; ++i) {
      SAMPLE_CHECK(cudaFree(held.back()));
      account.call("cudaFree", true);
      held.pop_back();
      live -= static_cast<int64_t>(chunk);
      account.live(0, -static_cast<int64_t>(chunk));
    }
    fill(chunk);
    report_failure(2, chunk);
  }
  account.print();
  return 1;
}
