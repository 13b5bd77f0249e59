// The stand-in PyTorch's C++ side, laid out as PyTorch's is where memtrace reaches it: the same
// namespaces and names (so the same mangled symbols), CUDAAllocator's virtual methods in their
// order, a TraceEntry with the fields and offsets of the real one, std::function trackers, the
// allocator behind an exported std::atomic. memtrace finds all of it as it finds PyTorch's;
// nothing here is memtrace's.
//
// One source, built once per release that matters (sim/CMakeLists.txt): SIM_TORCH_MINOR is
// the 2.x release it follows where releases differ.
//   c10/cuda/CUDACachingAllocator.h, v2.1 (header of that era): no trace trackers, TraceEntry
//     {action_, addr_, context_, stream_, size_} with SEGMENT_MAP/UNMAP before SNAPSHOT/OOM.
//   v2.2 (PR #112238, attachAllocatorTraceTracker) to v2.6: TraceEntry adds device_ (in the
//     padding after action_) and time_ at 48.
//   v2.8 (PR #150683 mempool_, #152707 compile_context_): TraceEntry adds mempool_ at 48 (the
//     pool of the block or segment the entry is about; time_ moves to 64) and compile_context_;
//     v2.10 (PR #165490) adds user_metadata_.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#ifndef SIM_TORCH_MINOR
#define SIM_TORCH_MINOR 11
#endif

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

using MempoolId_t = std::pair<unsigned long long, unsigned long long>;

struct TraceEntry {
  enum Action {
    ALLOC,           // API made a caching allocation
    FREE_REQUESTED,  // API call made to the caching allocator to free memory
    FREE_COMPLETED,  // The allocator might have to delay a free because it is still in use on another stream
    SEGMENT_ALLOC,   // a call to cudaMalloc to get more memory from the OS
    SEGMENT_FREE,    // a call to cudaFree to return memory to the OS
    SEGMENT_MAP,     // a call to cuMemMap (used with expandable_segments)
    SEGMENT_UNMAP,   // unmap part of a segment (used with expandable segments)
    SNAPSHOT,        // a call to snapshot, used to correlate memory snapshots to trace events
    OOM              // the allocator threw an OutOfMemoryError (addr_ is the amount of free bytes reported by cuda)
  };
  Action action_;
#if SIM_TORCH_MINOR >= 2
  DeviceIndex device_;
#endif
  size_t addr_;  // for OOM, this is the amount of free bytes reported by cuda
  std::shared_ptr<GatheredContext> context_;
  void* stream_{};
  size_t size_;
#if SIM_TORCH_MINOR >= 8
  MempoolId_t mempool_;
#endif
#if SIM_TORCH_MINOR >= 2
  uint64_t time_{};  // union trace_time_ {time_t t_; approx_time_t approx_t_;}: 8 bytes
#endif
#if SIM_TORCH_MINOR >= 8
  std::string compile_context_;
#endif
#if SIM_TORCH_MINOR >= 10
  std::string user_metadata_;
#endif
};

using AllocatorTraceTracker = std::function<void(const TraceEntry&)>;
// (device, the segment size it tried to get, the device's total (or the fraction's limit), free)
using OutOfMemoryObserver =
    std::function<void(int64_t device, size_t allocated, size_t device_total, size_t device_free)>;

// The virtual methods memtrace's lookup walks past, in the header's order. PyTorch's list is
// longer and changes between releases; what matters here is that attachAllocatorTraceTracker
// sits deep in the vtable, in a slot memtrace cannot know without an exported override.
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
  virtual void attachOutOfMemoryObserver(OutOfMemoryObserver observer) = 0;
#if SIM_TORCH_MINOR >= 2
  // "Attached AllocatorTraceTracker callbacks will be called while the per-device allocator lock
  // is held ... it is unsafe to try to acquire the GIL in this callback." (2.6's header)
  virtual void attachAllocatorTraceTracker(AllocatorTraceTracker tracker) = 0;
#endif
  virtual void enablePeerAccess(DeviceIndex dev, DeviceIndex dev_to_access) = 0;
  virtual std::string name() = 0;
};

// "C10_CUDA_API extern std::atomic<CUDAAllocator*> allocator;" (the header, 2.2.2 to 2.14):
// exported, and set at load time by the backend PYTORCH_CUDA_ALLOC_CONF names.
SIM_TORCH_API extern std::atomic<CUDAAllocator*> allocator;

}  // namespace cuda::CUDACachingAllocator
}  // namespace c10
