// The stand-in libc10_cuda's allocators, inside the library (hidden, as PyTorch's classes are):
// the native caching allocator (caching_allocator.cpp), the cudaMallocAsync backend
// (async_allocator.cpp), and what PYTORCH_CUDA_ALLOC_CONF says of them.
#pragma once

#include <cuda_runtime_api.h>

#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "memtrace/allocator_model/caching_allocator_model.h"
#include "pytorch_abi.h"

namespace c10::cuda::CUDACachingAllocator::Native {

// PYTORCH_CUDA_ALLOC_CONF as CUDAAllocatorConfig reads it (memtrace's allocator model): the
// options, or (CONFIG_ERROR not empty) PyTorch's message refusing them, which every malloc gives.
const memtrace::torch_model::AllocConf& config();
const std::string& config_error();

using memtrace::torch_model::DeviceStats;
using memtrace::torch_model::Stat;

// One entry of the history ring (record_history), with the time snapshots give (microseconds
// since the epoch) and the context of the frames recorded with it.
struct HistoryEntry {
  TraceEntry::Action action;
  uint64_t addr, size, stream, time_us;
  int64_t context;
};

// One device's caching allocator: memtrace's model of PyTorch's (analysis/allocator_model), over
// the simulated device's memory (cuda_memory.cpp), with what PyTorch keeps around it: the lock,
// the trace trackers, the out-of-memory observers, the history ring and the snapshot.
class DeviceCachingAllocator : public memtrace::torch_model::TraceListener {
 public:
  explicit DeviceCachingAllocator(DeviceIndex device);
  ~DeviceCachingAllocator() override;
  uint64_t malloc(size_t orig_size, void* stream, int64_t context, std::string& error);
  bool free(uint64_t addr, bool record_stream);
  void empty_cache();
  void attach_tracker(AllocatorTraceTracker tracker);
  void attach_observer(OutOfMemoryObserver observer);
  void record_history(bool enabled, int context_level, size_t max_entries);
  DeviceStats stats();
  void reset_peak_stats();
  void reset_accumulated_stats();
  void begin_pool(MempoolId_t id, CUDAAllocator* pool_allocator);
  void end_pool();
  void release_pool(MempoolId_t id);
  void snapshot(std::string& segments, std::string& trace);

 private:
  // record_trace: every action the model takes, to the trackers and the history ring.
  void on_trace(memtrace::torch_model::Action action, uint64_t addr, uint64_t size, uint64_t stream, int64_t context,
                memtrace::torch_model::PoolId pool) override;
  void record_trace(TraceEntry::Action action, uint64_t addr, uint64_t size, void* stream, int64_t context,
                    MempoolId_t pool, int device = -1);

  const DeviceIndex device_;
  std::recursive_mutex mutex_;
  std::map<MempoolId_t, CUDAAllocator*> pool_allocators_;  // MemPools with an allocator of their own
  std::unique_ptr<memtrace::torch_model::DeviceMemory> memory_;
  std::unique_ptr<memtrace::torch_model::CachingAllocatorModel> model_;
  std::vector<AllocatorTraceTracker> trackers_;
  std::vector<OutOfMemoryObserver> observers_;
  bool record_history_ = false;
  int context_level_ = 0;  // 0: none, 1: state, 2: alloc, 3: all (RecordContext)
  size_t max_entries_ = 1;
  std::deque<HistoryEntry> history_;
};

// The simulated device's memory as PyTorch reaches it: cudaMalloc/cudaFree (a MemPool's own
// allocator's raw_alloc/raw_delete), the driver's VMM functions for expandable segments.
std::unique_ptr<memtrace::torch_model::DeviceMemory> cuda_memory(DeviceIndex device,
                                                                 const std::map<MempoolId_t, CUDAAllocator*>& pools);

class NativeCachingAllocator : public CUDAAllocator {
 public:
  static NativeCachingAllocator& instance();
  std::vector<DeviceCachingAllocator*> devices;

  uint64_t malloc(size_t size, int device, void* stream, int64_t context, std::string& error);
  bool free(uint64_t addr, bool record_stream);

  void* raw_alloc(size_t) override { return nullptr; }
  void* raw_alloc_with_stream(size_t, void*) override { return nullptr; }
  void raw_delete(void*) override {}
  void init(int device_count) override;
  bool initialized() override { return !devices.empty(); }
  double getMemoryFraction(DeviceIndex) override { return 1; }
  void setMemoryFraction(double, DeviceIndex) override {}
  void emptyCache() override;
  void enable(bool) override {}
  bool isEnabled() const override { return true; }
  void cacheInfo(DeviceIndex, size_t*) override {}
  void* getBaseAllocation(void* ptr, size_t*) override { return ptr; }
  void recordStream(void*, void*) override {}
  void resetAccumulatedStats(DeviceIndex device) override;
  void resetPeakStats(DeviceIndex device) override;
  void beginAllocateToPool(DeviceIndex, MempoolId_t) override {}
  void endAllocateToPool(DeviceIndex, MempoolId_t) override {}
  void releasePool(DeviceIndex, MempoolId_t) override {}
  std::shared_ptr<void> getIpcDevPtr(std::string) override { return nullptr; }
  bool isHistoryEnabled() override { return false; }
  void recordHistory(bool enabled, size_t max_entries) override;
  void attachOutOfMemoryObserver(OutOfMemoryObserver observer) override;
#if SIM_TORCH_MINOR >= 2
  void attachAllocatorTraceTracker(AllocatorTraceTracker tracker) override;
#endif
  void enablePeerAccess(DeviceIndex, DeviceIndex) override {}
  std::string name() override { return "native"; }

 private:
  std::mutex owners_mutex_;
  std::map<uint64_t, int> owners_;
};

// The cudaMallocAsync backend (async_allocator.cpp); its C functions for the Python stand-in.
CUDAAllocator* async_allocator();
uint64_t async_malloc(size_t size, int device, void* stream, std::string& error);
bool async_free(uint64_t addr);
void async_stats(int device, DeviceStats& out);
void async_reset_peaks(int device);

}  // namespace c10::cuda::CUDACachingAllocator::Native
