// The stand-in PyTorch's C++ side, laid out as PyTorch 2.7's is where memtrace reaches it: the
// same namespaces and names (so the same mangled symbols), CUDAAllocator's virtual methods with
// attachAllocatorTraceTracker deep in its vtable, a TraceEntry with the fields and offsets of the
// real one, std::function trackers, the allocator behind an exported std::atomic. memtrace finds
// all of it as it finds PyTorch's; nothing here is memtrace's.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#define SIM_TORCH_API __attribute__((visibility("default")))

namespace c10 {

using DeviceIndex = int8_t;

// c10::Allocator's virtual methods come first in every allocator's vtable.
class SIM_TORCH_API Allocator {
 public:
  virtual ~Allocator();
  virtual void* allocate_bytes(size_t n);
  virtual void* raw_deleter() const;
  virtual void copy_data(void* dest, const void* src, size_t count) const;
};

namespace cuda::CUDACachingAllocator {

struct GatheredContext {
  virtual ~GatheredContext() = default;
};

using MempoolId_t = std::pair<uint64_t, uint64_t>;

struct TraceEntry {
  enum Action {
    ALLOC,
    FREE_REQUESTED,
    FREE_COMPLETED,
    SEGMENT_ALLOC,
    SEGMENT_FREE,
    SEGMENT_MAP,
    SEGMENT_UNMAP,
    SNAPSHOT,
    OOM
  };
  Action action_;
  DeviceIndex device_;
  size_t addr_;  // for OOM, the device's free bytes
  std::shared_ptr<GatheredContext> context_;
  void* stream_{};
  size_t size_;
  MempoolId_t mempool_;
  uint64_t time_{};
  std::string compile_context_;
  std::string user_metadata_;
};

using AllocatorTraceTracker = std::function<void(const TraceEntry&)>;

class SIM_TORCH_API CUDAAllocator : public Allocator {
 public:
  virtual void* raw_alloc(size_t nbytes) = 0;
  virtual void* raw_alloc_with_stream(size_t nbytes, void* stream) = 0;
  virtual void raw_delete(void* ptr) = 0;
  virtual void init(int device_count) = 0;
  virtual bool initialized() = 0;
  virtual double getMemoryFraction(DeviceIndex device) = 0;
  virtual void setMemoryFraction(double fraction, DeviceIndex device) = 0;
  virtual void emptyCache() = 0;
  virtual void enable(bool value) = 0;
  virtual bool isEnabled() const = 0;
  virtual void cacheInfo(DeviceIndex device, size_t* largest) = 0;
  virtual void* getBaseAllocation(void* ptr, size_t* size) = 0;
  virtual void recordStream(void* ptr, void* stream) = 0;
  virtual void resetAccumulatedStats(DeviceIndex device) = 0;
  virtual void resetPeakStats(DeviceIndex device) = 0;
  virtual void beginAllocateToPool(DeviceIndex device, MempoolId_t id) = 0;
  virtual void endAllocateToPool(DeviceIndex device, MempoolId_t id) = 0;
  virtual void releasePool(DeviceIndex device, MempoolId_t id) = 0;
  virtual std::shared_ptr<void> getIpcDevPtr(std::string handle) = 0;
  virtual bool isHistoryEnabled() = 0;
  virtual void recordHistory(bool enabled, size_t max_entries) = 0;
  virtual void attachOutOfMemoryObserver(std::function<void(int64_t, size_t, size_t, size_t)> observer) = 0;
  // Trackers run while the device's allocator lock is held; they must not take the GIL.
  virtual void attachAllocatorTraceTracker(AllocatorTraceTracker tracker) = 0;
  virtual void enablePeerAccess(DeviceIndex dev, DeviceIndex dev_to_access) = 0;
  virtual std::string name() = 0;
};

// The allocator in use, as PyTorch exports it.
SIM_TORCH_API extern std::atomic<CUDAAllocator*> allocator;

}  // namespace cuda::CUDACachingAllocator
}  // namespace c10
