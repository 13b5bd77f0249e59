// The stand-in libtorch_cuda.so: CUDAPluggableAllocator, exported as PyTorch exports it, whose
// attachAllocatorTraceTracker throws as the real one does (it has no trace). memtrace reads this
// class's vtable to find the method's slot.
#include <stdexcept>

#include "pytorch_abi.h"

namespace torch::cuda::CUDAPluggableAllocator {

using namespace c10::cuda::CUDACachingAllocator;

struct SIM_TORCH_API CUDAPluggableAllocator : public CUDAAllocator {
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
  void attachOutOfMemoryObserver(std::function<void(int64_t, size_t, size_t, size_t)> observer) override;
  void attachAllocatorTraceTracker(AllocatorTraceTracker tracker) override;
  void enablePeerAccess(c10::DeviceIndex dev, c10::DeviceIndex dev_to_access) override;
  std::string name() override;
};

namespace {
[[noreturn]] void unsupported(const char* what) {
  throw std::runtime_error(std::string("CUDAPluggableAllocator does not yet support ") + what);
}
}  // namespace

void* CUDAPluggableAllocator::raw_alloc(size_t) { unsupported("raw_alloc"); }
void* CUDAPluggableAllocator::raw_alloc_with_stream(size_t, void*) { unsupported("raw_alloc_with_stream"); }
void CUDAPluggableAllocator::raw_delete(void*) {}
void CUDAPluggableAllocator::init(int) {}
bool CUDAPluggableAllocator::initialized() { return true; }
double CUDAPluggableAllocator::getMemoryFraction(c10::DeviceIndex) { return 1; }
void CUDAPluggableAllocator::setMemoryFraction(double, c10::DeviceIndex) {}
void CUDAPluggableAllocator::emptyCache() {}
void CUDAPluggableAllocator::enable(bool) {}
bool CUDAPluggableAllocator::isEnabled() const { return true; }
void CUDAPluggableAllocator::cacheInfo(c10::DeviceIndex, size_t*) {}
void* CUDAPluggableAllocator::getBaseAllocation(void* ptr, size_t*) { return ptr; }
void CUDAPluggableAllocator::recordStream(void*, void*) {}
void CUDAPluggableAllocator::resetAccumulatedStats(c10::DeviceIndex) {}
void CUDAPluggableAllocator::resetPeakStats(c10::DeviceIndex) {}
void CUDAPluggableAllocator::beginAllocateToPool(c10::DeviceIndex, MempoolId_t) {}
void CUDAPluggableAllocator::endAllocateToPool(c10::DeviceIndex, MempoolId_t) {}
void CUDAPluggableAllocator::releasePool(c10::DeviceIndex, MempoolId_t) {}
std::shared_ptr<void> CUDAPluggableAllocator::getIpcDevPtr(std::string) { unsupported("getIpcDevPtr"); }
bool CUDAPluggableAllocator::isHistoryEnabled() { return false; }
void CUDAPluggableAllocator::recordHistory(bool, size_t) { unsupported("recordHistory"); }
void CUDAPluggableAllocator::attachOutOfMemoryObserver(std::function<void(int64_t, size_t, size_t, size_t)>) {
  unsupported("attachOutOfMemoryObserver");
}
void CUDAPluggableAllocator::attachAllocatorTraceTracker(AllocatorTraceTracker) {
  unsupported("attachAllocatorTraceTracker");
}
void CUDAPluggableAllocator::enablePeerAccess(c10::DeviceIndex, c10::DeviceIndex) {}
std::string CUDAPluggableAllocator::name() { return "pluggable"; }

}  // namespace torch::cuda::CUDAPluggableAllocator

// What torch.cuda.memory.change_current_allocator does, for the test that replaces the allocator.
extern "C" SIM_TORCH_API void sim_torch_use_pluggable_allocator() {
  static auto* pluggable = new torch::cuda::CUDAPluggableAllocator::CUDAPluggableAllocator();
  c10::cuda::CUDACachingAllocator::allocator.store(pluggable);
}
