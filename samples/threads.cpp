// Many threads allocating at once through the runtime, the driver, VMM and stream-ordered calls,
// so events from different threads interleave in the ring. Threads start and end while others run.
//   threads [--threads T] [--iterations N] [--together 1: all T threads run at once]
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <thread>
#include <vector>

#include "sample_account.h"

namespace {

sample::SharedAccount account;

void note(const char* api, bool ok, int64_t bytes) { account.note(api, ok, bytes); }

void worker(int index, long iterations) {
  SAMPLE_CHECK(cudaSetDevice(0));
  CUcontext ctx;
  SAMPLE_CHECK(cuCtxGetCurrent(&ctx));
  for (long i = 0; i < iterations; ++i) {
    const size_t bytes = 4096 * static_cast<size_t>(1 + (index * 7 + i) % 13);
    switch (i % 4) {
      case 0: {
        void* p;
        cudaError_t e = cudaMalloc(&p, bytes);
        SAMPLE_CHECK(e);
        note("cudaMalloc", true, static_cast<int64_t>(bytes));
        // Account the free before making it: another thread may get the address right after.
        note("cudaFree", true, -static_cast<int64_t>(bytes));
        SAMPLE_CHECK(cudaFree(p));
        break;
      }
      case 1: {
        CUdeviceptr p;
        SAMPLE_CHECK(cuMemAlloc(&p, bytes));
        note("cuMemAlloc", true, static_cast<int64_t>(bytes));
        note("cuMemFree", true, -static_cast<int64_t>(bytes));
        SAMPLE_CHECK(cuMemFree(p));
        break;
      }
      case 2: {
        // VMM, as expandable segments grow and shrink: physical page, mapping, and back.
        CUmemAllocationProp prop{};
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = 0;
        const size_t page = 2 << 20;
        CUdeviceptr va;
        CUmemGenericAllocationHandle h;
        SAMPLE_CHECK(cuMemAddressReserve(&va, page, 0, 0, 0));
        note("cuMemAddressReserve", true, 0);
        SAMPLE_CHECK(cuMemCreate(&h, page, &prop, 0));
        note("cuMemCreate", true, static_cast<int64_t>(page));
        SAMPLE_CHECK(cuMemMap(va, page, 0, h, 0));
        note("cuMemMap", true, 0);
        note("cuMemUnmap", true, 0);
        SAMPLE_CHECK(cuMemUnmap(va, page));
        note("cuMemRelease", true, -static_cast<int64_t>(page));
        SAMPLE_CHECK(cuMemRelease(h));
        note("cuMemAddressFree", true, 0);
        SAMPLE_CHECK(cuMemAddressFree(va, page));
        break;
      }
      default: {
        void* p;
        SAMPLE_CHECK(cudaMallocAsync(&p, bytes, nullptr));
        note("cudaMallocAsync", true, static_cast<int64_t>(bytes));
        note("cudaFreeAsync", true, -static_cast<int64_t>(bytes));
        SAMPLE_CHECK(cudaFreeAsync(p, nullptr));
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = static_cast<int>(sample::arg_value(argc, argv, "--threads", 8));
  const long iterations = sample::arg_value(argc, argv, "--iterations", 2000);
  const bool together = sample::arg_value(argc, argv, "--together", 0) != 0;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back(worker, t, iterations);
    if (!together && t % 2 == 1) {  // some threads end while others are still starting
      pool.front().join();
      pool.erase(pool.begin());
    }
  }
  for (auto& t : pool) t.join();
  account.print();
  return 0;
}
