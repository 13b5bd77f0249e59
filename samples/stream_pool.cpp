// Stream-ordered allocation: cudaMallocAsync on two streams, a private pool with
// cudaMallocFromPoolAsync, the per-thread default stream variants, and the driver's
// cuMemAllocAsync. Buffers are freed on the stream that used them last.
//   stream_pool [--iterations N]
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <vector>

#include "sample_account.h"

extern "C" {
cudaError_t cudaMallocAsync_ptsz(void** devPtr, size_t size, cudaStream_t stream);
cudaError_t cudaFreeAsync_ptsz(void* devPtr, cudaStream_t stream);
}

namespace {

sample::Account account;

void* async_alloc(size_t bytes, cudaStream_t stream) {
  void* p = nullptr;
  cudaError_t e = cudaMallocAsync(&p, bytes, stream);
  account.call("cudaMallocAsync", e == cudaSuccess);
  SAMPLE_CHECK(e);
  account.live(0, static_cast<int64_t>(bytes));
  return p;
}

void async_free(void* p, size_t bytes, cudaStream_t stream) {
  cudaError_t e = cudaFreeAsync(p, stream);
  account.call("cudaFreeAsync", e == cudaSuccess);
  SAMPLE_CHECK(e);
  account.live(0, -static_cast<int64_t>(bytes));
}

}  // namespace

int main(int argc, char** argv) {
  const long iterations = sample::arg_value(argc, argv, "--iterations", 10);
  cudaStream_t compute, copy;
  SAMPLE_CHECK(cudaStreamCreate(&compute));
  SAMPLE_CHECK(cudaStreamCreateWithFlags(&copy, 1));

  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  cudaMemPool_t pool;
  SAMPLE_CHECK(cudaMemPoolCreate(&pool, &props));

  for (long i = 0; i < iterations; ++i) {
    const size_t bytes = (static_cast<size_t>(i % 4) + 1) << 20;
    void* a = async_alloc(bytes, compute);
    void* b = async_alloc(2 * bytes, copy);

    void* pooled = nullptr;
    cudaError_t e = cudaMallocFromPoolAsync(&pooled, 3 * bytes, pool, compute);
    account.call("cudaMallocFromPoolAsync", e == cudaSuccess);
    SAMPLE_CHECK(e);
    account.live(0, static_cast<int64_t>(3 * bytes));

    void* per_thread = nullptr;
    e = cudaMallocAsync_ptsz(&per_thread, bytes / 2, nullptr);
    account.call("cudaMallocAsync", e == cudaSuccess);
    SAMPLE_CHECK(e);
    account.live(0, static_cast<int64_t>(bytes / 2));

    CUdeviceptr driver = 0;
    CUresult r = cuMemAllocAsync(&driver, bytes, reinterpret_cast<CUstream>(compute));
    account.call("cuMemAllocAsync", r == CUDA_SUCCESS);
    SAMPLE_CHECK(r);
    account.live(0, static_cast<int64_t>(bytes));

    r = cuMemFreeAsync(driver, reinterpret_cast<CUstream>(compute));
    account.call("cuMemFreeAsync", r == CUDA_SUCCESS);
    SAMPLE_CHECK(r);
    account.live(0, -static_cast<int64_t>(bytes));
    e = cudaFreeAsync_ptsz(per_thread, nullptr);
    account.call("cudaFreeAsync", e == cudaSuccess);
    SAMPLE_CHECK(e);
    account.live(0, -static_cast<int64_t>(bytes / 2));
    async_free(pooled, 3 * bytes, compute);
    async_free(b, 2 * bytes, copy);
    async_free(a, bytes, compute);
  }
  SAMPLE_CHECK(cudaStreamSynchronize(compute));
  SAMPLE_CHECK(cudaMemPoolDestroy(pool));
  SAMPLE_CHECK(cudaStreamDestroy(compute));
  SAMPLE_CHECK(cudaStreamDestroy(copy));
  account.print();
  return 0;
}
