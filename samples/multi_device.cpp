// Several devices: device d holds d+1 buffers while the others hold theirs, so each device has a
// peak of its own. Then, with device 0 current, stream-ordered allocations on the last device:
// cudaMallocAsync on a stream made there, and cudaMallocFromPoolAsync from its default pool. They
// belong to that device, not to the current one. Needs at least two devices
// (memtrace run --sim --sim-devices 2).
//   multi_device [--buffer-mib M]
#include <cuda_runtime_api.h>

#include <cstdio>
#include <vector>

#include "sample_account.h"

int main(int argc, char** argv) {
  sample::Account account;
  const size_t bytes = static_cast<size_t>(sample::arg_value(argc, argv, "--buffer-mib", 32)) << 20;
  int devices = 0;
  SAMPLE_CHECK(cudaGetDeviceCount(&devices));
  if (devices < 2) {
    std::fprintf(stderr, "multi_device needs at least 2 devices, found %d\n", devices);
    return 2;
  }
  std::vector<std::vector<void*>> held(static_cast<size_t>(devices));
  for (int d = 0; d < devices; ++d) {
    SAMPLE_CHECK(cudaSetDevice(d));
    for (int i = 0; i <= d; ++i) {
      void* p = nullptr;
      cudaError_t e = cudaMalloc(&p, bytes);
      account.call("cudaMalloc", e == cudaSuccess);
      SAMPLE_CHECK(e);
      account.live(d, static_cast<int64_t>(bytes));
      held[static_cast<size_t>(d)].push_back(p);
    }
  }
  for (int d = devices - 1; d >= 0; --d) {
    SAMPLE_CHECK(cudaSetDevice(d));
    for (void* p : held[static_cast<size_t>(d)]) {
      cudaError_t e = cudaFree(p);
      account.call("cudaFree", e == cudaSuccess);
      SAMPLE_CHECK(e);
      account.live(d, -static_cast<int64_t>(bytes));
    }
  }

  // Stream-ordered allocations away from the current device, each larger than device 0's peak.
  const int last = devices - 1;
  cudaStream_t stream;
  cudaMemPool_t pool;
  SAMPLE_CHECK(cudaSetDevice(last));
  SAMPLE_CHECK(cudaStreamCreate(&stream));
  SAMPLE_CHECK(cudaDeviceGetDefaultMemPool(&pool, last));
  SAMPLE_CHECK(cudaSetDevice(0));
  void* on_stream = nullptr;
  void* from_pool = nullptr;
  cudaError_t e = cudaMallocAsync(&on_stream, 2 * bytes, stream);
  account.call("cudaMallocAsync", e == cudaSuccess);
  SAMPLE_CHECK(e);
  account.live(last, static_cast<int64_t>(2 * bytes));
  e = cudaMallocFromPoolAsync(&from_pool, 3 * bytes, pool, stream);
  account.call("cudaMallocFromPoolAsync", e == cudaSuccess);
  SAMPLE_CHECK(e);
  account.live(last, static_cast<int64_t>(3 * bytes));
  for (void* p : {on_stream, from_pool}) {
    e = cudaFreeAsync(p, stream);
    account.call("cudaFreeAsync", e == cudaSuccess);
    SAMPLE_CHECK(e);
  }
  account.live(last, -static_cast<int64_t>(5 * bytes));
  SAMPLE_CHECK(cudaStreamDestroy(stream));
  account.print();
  return 0;
}
