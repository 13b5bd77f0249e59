// A program linked with the CUDA runtime statically, as nvcc links by default (-cudart static):
// no CUDA library among its dependencies. The runtime inside it opens libcuda.so.1 itself and
// fetches every driver function through cuGetProcAddress_v2, so none of its calls pass through
// the global scope. Threads allocate at once; one takes driver functions from
// cudaGetDriverEntryPoint as NCCL does; one buffer is left allocated at exit. With --ask-only 1
// it only asks how many devices there are: a program that used CUDA and allocated nothing.
//   static_runtime [--threads T] [--iterations N] [--ask-only 1]
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <thread>
#include <vector>

#include "sample_account.h"

namespace {

sample::SharedAccount account;

void note(const char* api, bool ok, int64_t bytes) { account.note(api, ok, bytes); }

void worker(int index, long iterations) {
  cudaStream_t stream;
  SAMPLE_CHECK(cudaStreamCreate(&stream));
  for (long i = 0; i < iterations; ++i) {
    const size_t bytes = (1 << 16) * static_cast<size_t>(1 + (index * 5 + i) % 11);
    void* p;
    if (i % 2 == 0) {
      SAMPLE_CHECK(cudaMalloc(&p, bytes));
      note("cudaMalloc", true, static_cast<int64_t>(bytes));
      // Accounted before the free: another thread may get the address right after.
      note("cudaFree", true, -static_cast<int64_t>(bytes));
      SAMPLE_CHECK(cudaFree(p));
    } else {
      SAMPLE_CHECK(cudaMallocAsync(&p, bytes, stream));
      note("cudaMallocAsync", true, static_cast<int64_t>(bytes));
      note("cudaFreeAsync", true, -static_cast<int64_t>(bytes));
      SAMPLE_CHECK(cudaFreeAsync(p, stream));
    }
  }
  SAMPLE_CHECK(cudaStreamSynchronize(stream));
  SAMPLE_CHECK(cudaStreamDestroy(stream));
}

// NCCL's way: the driver's allocation functions from the runtime's entry-point lookup.
void through_entry_points() {
  using Alloc = CUresult (*)(CUdeviceptr*, size_t);
  using Free = CUresult (*)(CUdeviceptr);
  void *alloc_fn = nullptr, *free_fn = nullptr;
  cudaDriverEntryPointQueryResult found;
  SAMPLE_CHECK(cudaGetDriverEntryPointByVersion("cuMemAlloc", &alloc_fn, 12000, cudaEnableDefault, &found));
  SAMPLE_CHECK(cudaGetDriverEntryPointByVersion("cuMemFree", &free_fn, 12000, cudaEnableDefault, &found));
  CUdeviceptr p = 0;
  SAMPLE_CHECK(reinterpret_cast<Alloc>(alloc_fn)(&p, 3 << 20));
  note("cuMemAlloc", true, 3 << 20);
  note("cuMemFree", true, -(3 << 20));
  SAMPLE_CHECK(reinterpret_cast<Free>(free_fn)(p));
}

}  // namespace

int main(int argc, char** argv) {
  const long threads = sample::arg_value(argc, argv, "--threads", 4);
  const long iterations = sample::arg_value(argc, argv, "--iterations", 200);
  if (sample::arg_value(argc, argv, "--ask-only", 0)) {
    int count = 0;
    SAMPLE_CHECK(cudaGetDeviceCount(&count));
    account.print();
    return 0;
  }
  // The first CUDA call allocates: the runtime initializes inside it (CUPTI's callbacks for it come
  // once the runtime did).
  void* kept;
  SAMPLE_CHECK(cudaMalloc(&kept, 5 << 20));  // never freed
  note("cudaMalloc", true, 5 << 20);
  void *managed, *pinned;
  SAMPLE_CHECK(cudaMallocManaged(&managed, 2 << 20, cudaMemAttachGlobal));
  note("cudaMallocManaged", true, 2 << 20);
  SAMPLE_CHECK(cudaMallocHost(&pinned, 1 << 20));
  note("cudaMallocHost", true, 0);
  through_entry_points();

  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) workers.emplace_back(worker, t, iterations);
  for (auto& w : workers) w.join();

  note("cudaFreeHost", cudaFreeHost(pinned) == cudaSuccess, 0);
  note("cudaFree", cudaFree(managed) == cudaSuccess, -(2 << 20));
  account.print();
  return 0;
}
