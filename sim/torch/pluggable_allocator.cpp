// The stand-in libtorch_cuda.so: CUDAPluggableAllocator, as torch/csrc/cuda/CUDAPluggableAllocator.{h,cpp}
// has it: an allocator over the two functions of a user's library (alloc_fn(size, device,
// stream), free_fn(ptr, size, device, stream)), the current allocator after
// torch.cuda.memory.change_current_allocator, or the allocator of a torch.cuda.MemPool. Its
// attachAllocatorTraceTracker throws "CUDAPluggableAllocator does not support
// attachAllocatorTraceTracker. attachAllocatorTraceTracker is only used inside Pytorch." (the
// ~2.2 and newest sources alike).
//
// Exported or not, by release: 2.2.2 and 2.3.0.dev20240308 declare `struct CUDAPluggableAllocator`
// with no export macro (-fvisibility=hidden then hides it); 2.6.0 and every later copy read declare
// `struct TORCH_CUDA_CPP_API CUDAPluggableAllocator` (which of 2.4, 2.5 or 2.6 was first is not
// pinned down: the stand-in exports it from 2.6). memtrace finds attachAllocatorTraceTracker's
// vtable slot from this class's exported vtable and method.
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>

#include "caching_allocator.h"

#if SIM_TORCH_MINOR >= 6
#define SIM_TORCH_CUDA_CPP_API SIM_TORCH_API
#else
#define SIM_TORCH_CUDA_CPP_API
#endif

namespace torch::cuda::CUDAPluggableAllocator {

using namespace c10::cuda::CUDACachingAllocator;
using AllocFn = void* (*)(size_t size, int device, void* stream);
using FreeFn = void (*)(void* ptr, size_t size, int device, void* stream);

struct SIM_TORCH_CUDA_CPP_API CUDAPluggableAllocator : public CUDAAllocator {
  CUDAPluggableAllocator(AllocFn alloc_fn, FreeFn free_fn) : alloc_fn_(alloc_fn), free_fn_(free_fn) {}
  void* raw_alloc(size_t nbytes) override;
  void* raw_alloc_with_stream(size_t nbytes, void* stream) override;
  void raw_delete(void* ptr) override;
  void init(int device_count) override;
  bool initialized() override;
  double getMemoryFraction(c10::DeviceIndex device) override;
  void setMemoryFraction(double fraction, c10::DeviceIndex device) override;
  void emptyCache() override;
  void enable(bool value) override;
  bool isEnabled() const override;
  void cacheInfo(c10::DeviceIndex device, size_t* largest) override;
  void* getBaseAllocation(void* ptr, size_t* size) override;
  void recordStream(void* ptr, void* stream) override;
  void resetAccumulatedStats(c10::DeviceIndex device) override;
  void resetPeakStats(c10::DeviceIndex device) override;
  void beginAllocateToPool(c10::DeviceIndex device, MempoolId_t id) override;
  void endAllocateToPool(c10::DeviceIndex device, MempoolId_t id) override;
  void releasePool(c10::DeviceIndex device, MempoolId_t id) override;
  std::shared_ptr<void> getIpcDevPtr(std::string handle) override;
  bool isHistoryEnabled() override;
  void recordHistory(bool enabled, size_t max_entries) override;
  void attachOutOfMemoryObserver(OutOfMemoryObserver observer) override;
#if SIM_TORCH_MINOR >= 2
  void attachAllocatorTraceTracker(AllocatorTraceTracker tracker) override;
#endif
  void enablePeerAccess(c10::DeviceIndex dev, c10::DeviceIndex dev_to_access) override;
  std::string name() override;

 private:
  AllocFn alloc_fn_;
  FreeFn free_fn_;
  std::mutex mutex_;
  std::map<void*, size_t> sizes_;  // allocation_metadata_: what free_fn is told
  bool initialized_ = false;
};

namespace {
[[noreturn]] void not_yet(const char* what) {
  throw std::runtime_error(std::string("CUDAPluggableAllocator does not yet support ") + what +
                           ". If you need it, please file an issue describing your use case.");
}
int current_device() {
  int device = 0;
  cudaGetDevice(&device);
  return device;
}
}  // namespace

void* CUDAPluggableAllocator::raw_alloc(size_t nbytes) { return raw_alloc_with_stream(nbytes, nullptr); }
void* CUDAPluggableAllocator::raw_alloc_with_stream(size_t nbytes, void* stream) {
  void* ptr = alloc_fn_(nbytes, current_device(), stream);
  std::lock_guard lock(mutex_);
  if (ptr) sizes_[ptr] = nbytes;
  return ptr;
}
void CUDAPluggableAllocator::raw_delete(void* ptr) {
  size_t size = 0;
  {
    std::lock_guard lock(mutex_);
    auto it = sizes_.find(ptr);
    if (it == sizes_.end()) return;
    size = it->second;
    sizes_.erase(it);
  }
  free_fn_(ptr, size, current_device(), nullptr);
}
void CUDAPluggableAllocator::init(int) { initialized_ = true; }
bool CUDAPluggableAllocator::initialized() { return initialized_; }
double CUDAPluggableAllocator::getMemoryFraction(c10::DeviceIndex) { not_yet("getMemoryFraction"); }
void CUDAPluggableAllocator::setMemoryFraction(double, c10::DeviceIndex) {}
void CUDAPluggableAllocator::emptyCache() {}
void CUDAPluggableAllocator::enable(bool) {}
bool CUDAPluggableAllocator::isEnabled() const { return true; }
void CUDAPluggableAllocator::cacheInfo(c10::DeviceIndex, size_t*) { not_yet("cacheInfo"); }
void* CUDAPluggableAllocator::getBaseAllocation(void* ptr, size_t*) { return ptr; }
void CUDAPluggableAllocator::recordStream(void*, void*) {}
void CUDAPluggableAllocator::resetAccumulatedStats(c10::DeviceIndex) { not_yet("resetAccumulatedStats"); }
void CUDAPluggableAllocator::resetPeakStats(c10::DeviceIndex) { not_yet("resetPeakStats"); }
void CUDAPluggableAllocator::beginAllocateToPool(c10::DeviceIndex, MempoolId_t) {}
void CUDAPluggableAllocator::endAllocateToPool(c10::DeviceIndex, MempoolId_t) {}
void CUDAPluggableAllocator::releasePool(c10::DeviceIndex, MempoolId_t) {}
std::shared_ptr<void> CUDAPluggableAllocator::getIpcDevPtr(std::string) { not_yet("getIpcDevPtr"); }
bool CUDAPluggableAllocator::isHistoryEnabled() { return false; }
void CUDAPluggableAllocator::recordHistory(bool, size_t) { not_yet("recordHistory"); }
void CUDAPluggableAllocator::attachOutOfMemoryObserver(OutOfMemoryObserver) { not_yet("attachOutOfMemoryObserver"); }
#if SIM_TORCH_MINOR >= 2
void CUDAPluggableAllocator::attachAllocatorTraceTracker(AllocatorTraceTracker) {
  throw std::runtime_error(
      "CUDAPluggableAllocator does not support attachAllocatorTraceTracker. attachAllocatorTraceTracker is only used "
      "inside Pytorch.");
}
#endif
void CUDAPluggableAllocator::enablePeerAccess(c10::DeviceIndex, c10::DeviceIndex) {}
std::string CUDAPluggableAllocator::name() { return "pluggable"; }

}  // namespace torch::cuda::CUDAPluggableAllocator

using torch::cuda::CUDAPluggableAllocator::CUDAPluggableAllocator;

extern "C" {

// torch.cuda.memory.CUDAPluggableAllocator(path, alloc_fn_name, free_fn_name), given the two
// functions the Python stand-in found in the library.
SIM_TORCH_API void* sim_torch_pluggable_create(void* alloc_fn, void* free_fn) {
  return new CUDAPluggableAllocator(reinterpret_cast<torch::cuda::CUDAPluggableAllocator::AllocFn>(alloc_fn),
                                    reinterpret_cast<torch::cuda::CUDAPluggableAllocator::FreeFn>(free_fn));
}

// torch.cuda.memory.change_current_allocator: "Can't swap an already initialized allocator".
SIM_TORCH_API int sim_torch_change_current_allocator(void* pluggable, char* error, size_t error_bytes) {
  auto& current = c10::cuda::CUDACachingAllocator::allocator;
  if (current.load()->initialized()) {
    std::snprintf(error, error_bytes, "Can't swap an already initialized allocator");
    return -1;
  }
  current.store(static_cast<CUDAPluggableAllocator*>(pluggable));
  return 0;
}

}  // extern "C"
