// The stand-in's cudaMallocAsync backend (PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync), as
// c10/cuda/CUDAMallocAsyncAllocator.cpp has it from 2.2 to the newest sources read:
//   - every tensor is a cudaMallocAsync on its stream from the device's default pool, whose
//     release threshold is set to keep freed memory (lazy_init_device); a free is cudaFreeAsync;
//   - attachAllocatorTraceTracker, attachOutOfMemoryObserver and recordHistory throw
//     TORCH_CHECK(false, "cudaMallocAsync does not yet support <X>. If you need it, please file
//     an issue describing your use case.");
//   - getDeviceStats fills only allocated, active and reserved bytes, from the pool's
//     cudaMemPoolAttr{Used,Reserved}Mem{Current,High};
//   - name() is "cudaMallocAsync".
// The class is hidden, as libc10_cuda hides its classes.
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>

#include "caching_allocator.h"

namespace c10::cuda::CUDACachingAllocator::CudaMallocAsync {

namespace {
[[noreturn]] void not_yet(const char* what) {
  throw std::runtime_error(std::string("cudaMallocAsync does not yet support ") + what +
                           ". If you need it, please file an issue describing your use case.");
}
}  // namespace

struct CudaMallocAsyncAllocator : public CUDAAllocator {
  std::mutex mutex;
  std::map<uint64_t, int> devices_of;  // ptr_info: the device of every live allocation
  std::map<int, bool> initialized_devices;

  uint64_t malloc(size_t size, int device, void* stream, std::string& error) {
    std::lock_guard lock(mutex);
    if (!initialized_devices[device]) {  // lazy_init_device: keep what is freed in the pool
      cudaMemPool_t pool = nullptr;
      cudaDeviceGetDefaultMemPool(&pool, device);
      uint64_t threshold = UINT64_MAX;
      cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold);
      initialized_devices[device] = true;
    }
    void* ptr = nullptr;
    cudaError_t err = cudaMallocAsync(&ptr, size, static_cast<cudaStream_t>(stream));
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      char text[160];
      std::snprintf(text, sizeof text, "Allocation on device %d would exceed allowed memory. (out of memory)", device);
      error = text;
      return 0;
    }
    if (err != cudaSuccess) {
      error = cudaGetErrorString(err);
      return 0;
    }
    devices_of[reinterpret_cast<uint64_t>(ptr)] = device;
    return reinterpret_cast<uint64_t>(ptr);
  }
  bool free(uint64_t addr) {
    std::lock_guard lock(mutex);
    if (!devices_of.erase(addr)) return false;
    cudaFreeAsync(reinterpret_cast<void*>(addr), nullptr);
    return true;
  }

  void* raw_alloc(size_t) override { return nullptr; }
  void* raw_alloc_with_stream(size_t, void*) override { return nullptr; }
  void raw_delete(void*) override {}
  void init(int) override {}
  bool initialized() override { return true; }
  double getMemoryFraction(DeviceIndex) override { return 1; }
  void setMemoryFraction(double, DeviceIndex) override {}
  void emptyCache() override {
    std::lock_guard lock(mutex);
    cudaDeviceSynchronize();
    for (auto& [device, done] : initialized_devices) {
      cudaMemPool_t pool = nullptr;
      cudaDeviceGetDefaultMemPool(&pool, device);
      cudaMemPoolTrimTo(pool, 0);
    }
  }
  void enable(bool) override {}
  bool isEnabled() const override { return true; }
  void cacheInfo(DeviceIndex, size_t*) override {}
  void* getBaseAllocation(void* ptr, size_t*) override { return ptr; }
  void recordStream(void*, void*) override {}
  void resetAccumulatedStats(DeviceIndex) override {}
  void resetPeakStats(DeviceIndex) override {}
  void beginAllocateToPool(DeviceIndex, MempoolId_t) override {}
  void endAllocateToPool(DeviceIndex, MempoolId_t) override {}
  void releasePool(DeviceIndex, MempoolId_t) override {}
  std::shared_ptr<void> getIpcDevPtr(std::string) override { not_yet("getIpcDevPtr"); }
  bool isHistoryEnabled() override { return false; }
  void recordHistory(bool, size_t) override { not_yet("recordHistory"); }
  void attachOutOfMemoryObserver(OutOfMemoryObserver) override { not_yet("attachOutOfMemoryObserver"); }
#if SIM_TORCH_MINOR >= 2
  void attachAllocatorTraceTracker(AllocatorTraceTracker) override { not_yet("attachAllocatorTraceTracker"); }
#endif
  void enablePeerAccess(DeviceIndex, DeviceIndex) override {}
  std::string name() override { return "cudaMallocAsync"; }
};

CudaMallocAsyncAllocator& instance() {
  static auto* a = new CudaMallocAsyncAllocator();
  return *a;
}

}  // namespace c10::cuda::CUDACachingAllocator::CudaMallocAsync

namespace c10::cuda::CUDACachingAllocator::Native {

CUDAAllocator* async_allocator() { return &CudaMallocAsync::instance(); }

uint64_t async_malloc(size_t size, int device, void* stream, std::string& error) {
  return CudaMallocAsync::instance().malloc(size, device, stream, error);
}

bool async_free(uint64_t addr) { return CudaMallocAsync::instance().free(addr); }

void async_reset_peaks(int device) {
  cudaMemPool_t pool = nullptr;
  if (cudaDeviceGetDefaultMemPool(&pool, device) != cudaSuccess) return;
  uint64_t zero = 0;
  cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &zero);
  cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero);
}

void async_stats(int device, DeviceStats& out) {
  cudaMemPool_t pool = nullptr;
  if (cudaDeviceGetDefaultMemPool(&pool, device) != cudaSuccess) return;
  auto attribute = [&](cudaMemPoolAttr attr) {
    uint64_t value = 0;
    cudaMemPoolGetAttribute(pool, attr, &value);
    return static_cast<int64_t>(value);
  };
  int64_t used = attribute(cudaMemPoolAttrUsedMemCurrent), used_high = attribute(cudaMemPoolAttrUsedMemHigh);
  int64_t reserved = attribute(cudaMemPoolAttrReservedMemCurrent);
  int64_t reserved_high = attribute(cudaMemPoolAttrReservedMemHigh);
  out.allocated_bytes.all.current = out.active_bytes.all.current = used;
  out.allocated_bytes.all.peak = out.active_bytes.all.peak = used_high;
  out.reserved_bytes.all.current = reserved;
  out.reserved_bytes.all.peak = reserved_high;
}

}  // namespace c10::cuda::CUDACachingAllocator::Native
