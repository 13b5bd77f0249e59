// fork while other threads are inside recorded calls: one thread keeps allocating (deep native
// stacks, so the unwinder is mid-walk much of the time) and marking, another keeps registering
// NVTX strings (memtrace keeps them under a lock), a third allocates stream-ordered and asks the
// pool what it holds (as PyTorch's cudaMallocAsync backend does for its statistics: the driver's
// pool lock, and memtrace's own samples of the device, are taken all the time), while the main
// thread forks --forks N children. Each child
// allocates, registers a string and exits. A child that has not finished within 20 s is hung (a lock a vanished thread
// held): it is killed and reported, and the program fails.
//   fork_in_call [--forks N]
#include <cuda_runtime_api.h>
#include <nvtx3/nvToolsExt.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <thread>
#include <vector>

#include "fork_children.h"
#include "sample_account.h"

namespace {

std::atomic<bool> g_stop{false};
nvtxDomainHandle_t g_domain;

__attribute__((noinline)) void allocate_deep(int depth) {
  if (depth > 0) {
    allocate_deep(depth - 1);
    asm volatile("" ::: "memory");  // a real frame per level, not a tail call
    return;
  }
  void* p = nullptr;
  if (cudaMalloc(&p, 4096) == cudaSuccess) cudaFree(p);
}

void allocate_forever() {
  while (!g_stop.load(std::memory_order_relaxed)) {
    allocate_deep(20);
    nvtxMarkA("hammer");
  }
}

void allocate_from_pool_forever() {
  cudaMemPool_t pool = nullptr;
  if (cudaDeviceGetDefaultMemPool(&pool, 0) != cudaSuccess) return;
  while (!g_stop.load(std::memory_order_relaxed)) {
    void* p = nullptr;
    if (cudaMallocAsync(&p, 8192, nullptr) == cudaSuccess) cudaFreeAsync(p, nullptr);
    uint64_t reserved = 0, used = 0;
    cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved);
    cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used);
  }
}

void register_forever() {
  char name[32];
  for (long i = 0; !g_stop.load(std::memory_order_relaxed); ++i) {
    std::snprintf(name, sizeof name, "string %ld", i % 1024);
    nvtxDomainRegisterStringA(g_domain, name);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const long forks = sample::arg_value(argc, argv, "--forks", 40);
  g_domain = nvtxDomainCreateA("fork_in_call");
  allocate_deep(0);  // CUDA and memtrace ready before the threads start
  std::vector<std::thread> threads;
  threads.emplace_back(allocate_forever);
  threads.emplace_back(register_forever);
  threads.emplace_back(allocate_from_pool_forever);

  sample::ForkCounts counts = sample::fork_children(
      "fork_in_call", forks,
      [] {
        allocate_deep(5);
        nvtxDomainRegisterStringA(g_domain, "child");
        return 0;
      },
      std::chrono::milliseconds(2));  // between forks, the threads get back into their calls
  g_stop = true;
  for (auto& t : threads) t.join();
  std::printf("forks %ld hung %d failed %d\n", forks, counts.hung, counts.failed);
  return counts.hung || counts.failed ? 1 : 0;
}
