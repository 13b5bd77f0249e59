// Out of memory: allocates ever more until the device refuses, reports it as PyTorch would, and
// dies with exit status 1 holding everything it got.
//   oom [--chunk-mib M]
#include <cuda_runtime_api.h>

#include <cstdio>

#include "sample_account.h"

int main(int argc, char** argv) {
  sample::Account account;
  const size_t chunk = static_cast<size_t>(sample::arg_value(argc, argv, "--chunk-mib", 1024)) << 20;
  for (;;) {
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, chunk);
    account.call("cudaMalloc", e == cudaSuccess);
    if (e == cudaErrorMemoryAllocation) {
      size_t free_bytes = 0, total = 0;
      cudaMemGetInfo(&free_bytes, &total);
      std::fprintf(stderr, "CUDA out of memory. Tried to allocate %zu MiB; %zu MiB free of %zu MiB\n", chunk >> 20,
                   free_bytes >> 20, total >> 20);
      account.print();
      return 1;
    }
    SAMPLE_CHECK(e);
    account.live(0, static_cast<int64_t>(chunk));
  }
}
