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

#include "pytorch_abi.h"

namespace c10::cuda::CUDACachingAllocator::Native {

struct AllocatorConfig {
  bool expandable_segments = false;
  size_t roundup_power2_divisions = 0;  // the single-number form, applied to every size
  std::string backend = "native";
};
const AllocatorConfig& config();

// A Stat of c10/core/CachingDeviceAllocator.h (v2.6.0): current, peak, allocated, freed; for all
// pools, the small pool and the large pool (StatType AGGREGATE, SMALL_POOL, LARGE_POOL).
struct Stat {
  int64_t current = 0, peak = 0, allocated = 0, freed = 0;
  void increase(int64_t amount) {
    current += amount;
    peak = std::max(current, peak);
    allocated += amount;
  }
  void decrease(int64_t amount) {
    current -= amount;
    freed += amount;
  }
};
struct StatArray {
  Stat all, small, large;
  void increase(int64_t amount, bool small_pool) {
    all.increase(amount);
    (small_pool ? small : large).increase(amount);
  }
  void decrease(int64_t amount, bool small_pool) {
    all.decrease(amount);
    (small_pool ? small : large).decrease(amount);
  }
};
struct DeviceStats {
  StatArray allocation, segment, active, allocated_bytes, reserved_bytes, active_bytes, requested_bytes;
  int64_t num_alloc_retries = 0, num_ooms = 0, num_device_alloc = 0, num_device_free = 0;
  template <typename Fn>
  void for_each(Fn fn) {
    for (StatArray* a :
         {&allocation, &segment, &active, &allocated_bytes, &reserved_bytes, &active_bytes, &requested_bytes})
      for (Stat* s : {&a->all, &a->small, &a->large}) fn(*s);
  }
};

struct BlockPool;
struct PrivatePool;
struct ExpandableSegment;

struct Block {
  DeviceIndex device = 0;
  void* stream = nullptr;
  size_t size = 0, requested_size = 0;
  BlockPool* pool = nullptr;
  uint64_t ptr = 0;
  bool allocated = false, mapped = true;
  bool pending = false;  // freed, waiting for the events recorded on the streams that used it
  Block *prev = nullptr, *next = nullptr;
  ExpandableSegment* segment = nullptr;
  int64_t context = 0, segment_context = 0;  // the Python stand-in's frames (history with context)
};

// One entry of the history ring (record_history), with the time snapshots give (microseconds
// since the epoch) and the context of the frames recorded with it.
struct HistoryEntry {
  TraceEntry::Action action;
  uint64_t addr, size, stream, time_us;
  int64_t context;
};

class DeviceCachingAllocator {
 public:
  explicit DeviceCachingAllocator(DeviceIndex device);
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
  // POOL: the pool of the block or segment the entry is about; DEVICE: the entry's device, when
  // not this allocator's (SNAPSHOT's is always 0).
  void record_trace(TraceEntry::Action action, uint64_t addr, uint64_t size, void* stream, int64_t context,
                    const BlockPool* pool, int device = -1);
  BlockPool& pool_for(size_t size);
  bool expandable_for(const BlockPool& pool) const;
  bool should_split(const Block* block, size_t size) const;
  Block* get_free_block(BlockPool& pool, size_t size, void* stream);
  Block* alloc_block(BlockPool& pool, size_t size, size_t alloc_size, void* stream, bool retry, int64_t context);
  Block* new_expandable_segment(BlockPool& pool, void* stream);
  Block* find_expandable_block(BlockPool& pool, size_t size, void* stream);
  Block* try_allocate_expandable_block(BlockPool& pool, size_t size, void* stream, int64_t context);
  Block* map_block(Block* to_map, size_t size, int64_t context);
  void unmap_block(Block* block);
  size_t try_merge_blocks(Block* dst, Block* src, BlockPool& pool);
  void free_block(Block* block);
  void process_events();
  bool release_cached_blocks();
  void release_blocks(BlockPool& pool);
  void release_block(Block* block);
  void release_expandable_segment(Block* block);
  std::vector<BlockPool*> all_pools();
  std::vector<Block*> all_blocks(BlockPool& pool);

  const DeviceIndex device_;
  std::recursive_mutex mutex_;
  BlockPool* large_;
  BlockPool* small_;
  std::map<MempoolId_t, std::unique_ptr<PrivatePool>> private_pools_;
  PrivatePool* active_pool_ = nullptr;
  std::vector<ExpandableSegment*> expandable_;
  std::map<uint64_t, Block*> live_;
  std::vector<Block*> pending_;
  DeviceStats stats_;
  std::vector<AllocatorTraceTracker> trackers_;
  std::vector<OutOfMemoryObserver> observers_;
  bool record_history_ = false;
  int context_level_ = 0;  // 0: none, 1: state, 2: alloc, 3: all (RecordContext)
  size_t max_entries_ = 1;
  std::deque<HistoryEntry> history_;
};

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
