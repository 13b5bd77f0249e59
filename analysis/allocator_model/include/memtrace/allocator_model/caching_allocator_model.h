// PyTorch's CUDA caching allocator, one device's (DeviceCachingAllocator), rule by rule from
// c10/cuda/CUDACachingAllocator.cpp, over memory it is given: the stand-in PyTorch runs it over
// the simulated device, `memtrace whatif` over a virtual address space. Where releases differ,
// Release picks the rule (each rule cites its release in caching_allocator_model.cpp).
//
// Not thread-safe: a caller that shares one across threads holds its own lock (PyTorch's
// DeviceCachingAllocator holds its mutex around each of these).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "memtrace/allocator_model/alloc_conf.h"
#include "memtrace/format/torch_action.h"

namespace memtrace::torch_model {

// The 2.x release whose rules apply.
struct Release {
  int minor = 11;
};

// {0, 0}: the default pools; a CUDA graph's own pool {id, 0}; a MemPool's {0, id} (MempoolId_t).
using PoolId = std::pair<uint64_t, uint64_t>;

// TraceEntry::Action, in its order.
using Action = TorchAction;

// Where the memory comes from. Each call is one of PyTorch's calls into CUDA.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  // cudaMalloc, or the private pool's own allocator's raw_alloc (allocPrimitive); 0 when out of memory.
  virtual uint64_t allocate(size_t bytes, PoolId pool) = 0;
  virtual void free(uint64_t addr, size_t bytes, PoolId pool) = 0;
  // Expandable segments: cuMemAddressReserve (0 when refused), cuMemCreate+cuMemMap of the whole
  // pages of [addr, addr+bytes) (false, nothing left mapped, when out of memory), cuMemUnmap and
  // cuMemRelease of them, cuMemAddressFree.
  virtual uint64_t reserve_range(size_t bytes) = 0;
  virtual bool map(uint64_t addr, size_t bytes, size_t page) = 0;
  virtual void unmap(uint64_t addr, size_t bytes, size_t page) = 0;
  virtual void free_range(uint64_t addr, size_t bytes) = 0;
  // cudaMemGetInfo.
  virtual size_t free_bytes() = 0;
  virtual size_t total_bytes() = 0;
};

// What record_trace is told: each action as PyTorch's trace entry has it (ALLOC with the requested
// size; FREE_* with the block's requested size; segments with their own), CONTEXT the caller's tag.
class TraceListener {
 public:
  virtual ~TraceListener() = default;
  virtual void on_trace(Action action, uint64_t addr, uint64_t size, uint64_t stream, int64_t context, PoolId pool) = 0;
};

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
  Stat oversize_allocations, oversize_segments;  // blocks and segments of max_split_size or more
  int64_t num_alloc_retries = 0, num_ooms = 0, num_device_alloc = 0, num_device_free = 0;
  // The seven arrays, in memory_stats' order (torch/csrc/cuda/Module.cpp memoryStats).
  template <typename Fn>
  void for_each(Fn fn) {
    for (StatArray* a :
         {&allocation, &segment, &active, &allocated_bytes, &reserved_bytes, &active_bytes, &requested_bytes})
      for (Stat* s : {&a->all, &a->small, &a->large}) fn(*s);
  }
};

// A segment as a snapshot shows it: a cudaMalloc'd chain of blocks, or a run of mapped blocks of
// an expandable segment.
struct BlockView {
  uint64_t addr = 0, size = 0, requested = 0;
  bool allocated = false, pending = false;  // pending: freed, waiting for the streams that used it
  int64_t context = 0;
};
struct SegmentView {
  uint64_t addr = 0, size = 0, stream = 0;
  bool small = false, expandable = false;
  PoolId pool{0, 0};
  int64_t context = 0;
  std::vector<BlockView> blocks;
};

// An out-of-memory malloc: what PyTorch's message and observers are given.
struct OutOfMemory {
  size_t alloc_size = 0;  // the segment it tried to get
  size_t device_free = 0, device_total = 0;
};

class CachingAllocatorModel {
 public:
  struct Options {
    AllocConf conf;
    Release release;
    // Whether a malloc finds every free that waits for streams done (process_events): the stand-in
    // runs nothing on its streams; a replay completes each when the recording says.
    bool streams_done_at_malloc = true;
  };
  CachingAllocatorModel(DeviceMemory& memory, Options options, TraceListener* listener = nullptr);
  ~CachingAllocatorModel();
  CachingAllocatorModel(const CachingAllocatorModel&) = delete;
  CachingAllocatorModel& operator=(const CachingAllocatorModel&) = delete;

  // A block of at least SIZE bytes for STREAM: its address, or 0 with OOM set (1 EiB or more:
  // refused before any search, as PyTorch refuses it).
  uint64_t malloc(size_t size, uint64_t stream, int64_t context, OutOfMemory* oom);
  // FREE_REQUESTED; the block goes back to its pool now, or (WAIT_FOR_STREAMS: record_stream)
  // when complete_free or the next malloc's process_events says so. False: not a live block.
  bool free(uint64_t addr, bool wait_for_streams);
  bool complete_free(uint64_t addr);
  void empty_cache();
  // beginAllocateToPool (use_mem_pool, every stream) / endAllocateToPool / releasePool.
  // OWN_ALLOCATOR: the pool's segments come from an allocator of its own (a MemPool's).
  void begin_pool(PoolId id, bool own_allocator);
  void end_pool();
  void release_pool(PoolId id);
  // setMemoryFraction: what the allocator may reserve (allowed_memory_maximum); with it, and only
  // with it, garbage_collection_threshold acts (v2.6.0: any fraction; 2.9-era main: below 1.0).
  void set_memory_limit(size_t bytes);

  const DeviceStats& stats() const;
  void reset_peak_stats();
  void reset_accumulated_stats();
  std::vector<SegmentView> segments() const;
  // The largest free block of any pool (0: none).
  size_t largest_free_block() const;
  // Expandable segments (address ranges reserved, each with its pages mapped on demand).
  size_t expandable_segment_count() const;
  // segments().size(), without building them where no segment is expandable.
  size_t segment_count() const;

  // The state a replay starts from (a snapshot's, before its history): a segment that was
  // cudaMalloc'd at ADDR, then a block handed out at ADDR (its size as round_size gives it). False
  // when it does not fit what is there.
  bool adopt_segment(uint64_t addr, size_t size, uint64_t stream, PoolId pool);
  bool adopt_block(uint64_t addr, size_t requested, uint64_t stream, int64_t context);

  size_t round_size(size_t size) const;
  static size_t allocation_size(size_t rounded);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace memtrace::torch_model
