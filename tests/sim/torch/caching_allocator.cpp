// The stand-in libc10_cuda.so: a caching allocator that behaves as PyTorch's does where memory is
// concerned. Sizes round to 512 bytes; requests up to 1 MiB share 2 MiB segments, larger ones get
// 20 MiB segments below 10 MiB or their size rounded to 2 MiB; blocks are split and merged again;
// a failed cudaMalloc frees the cache and retries, then reports an OOM and fails. With
// expandable segments, large blocks live in one segment per device that grows by mapping 20 MiB
// pages (cuMemCreate, cuMemMap, reached through cudaGetDriverEntryPoint as c10 reaches them) and
// shrinks on empty_cache. Every event goes to the trace trackers, under the device's lock. The
// Python stand-in (python/torch) calls the C functions at the end, with the GIL released.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <vector>

#include "pytorch_abi.h"

namespace c10 {

Allocator::~Allocator() = default;
void* Allocator::allocate_bytes(size_t) { return nullptr; }
void* Allocator::raw_deleter() const { return nullptr; }
void Allocator::copy_data(void* dest, const void* src, size_t count) const { std::memcpy(dest, src, count); }

namespace cuda::CUDACachingAllocator {

SIM_TORCH_API std::atomic<CUDAAllocator*> allocator{nullptr};

namespace Native {
namespace {

constexpr size_t kMinBlock = 512, kSmallSize = 1 << 20, kSmallBuffer = 2 << 20, kLargeBuffer = 20 << 20,
                 kMinLargeAlloc = 10 << 20, kRoundLarge = 2 << 20, kPage = 20 << 20;
constexpr size_t kExpandableReserve = size_t(64) << 30;

size_t round_size(size_t size) { return size < kMinBlock ? kMinBlock : (size + kMinBlock - 1) / kMinBlock * kMinBlock; }
size_t segment_size(size_t size) {
  if (size <= kSmallSize) return kSmallBuffer;
  if (size < kMinLargeAlloc) return kLargeBuffer;
  return (size + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

struct Block {
  uint64_t addr = 0, size = 0;
  bool small = false, allocated = false, expandable = false;
  bool pending = false;  // freed by its tensor, waiting for a stream it was used on
  uint64_t segment = 0;  // the base of the cudaMalloc it lies in (0 for the expandable segment)
  uint64_t segment_bytes = 0;
};

struct Stats {
  uint64_t allocated = 0, allocated_peak = 0, reserved = 0, reserved_peak = 0, segments = 0, ooms = 0, allocations = 0,
           segments_allocated = 0;
};

template <typename Fn>
Fn driver(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  cudaGetDriverEntryPointByVersion(name, &fn, 12030, cudaEnableDefault, &found);  // as c10's DriverAPI does
  return reinterpret_cast<Fn>(fn);
}

class DeviceCachingAllocator {
 public:
  explicit DeviceCachingAllocator(DeviceIndex device) : device_(device) {}

  void attach(AllocatorTraceTracker tracker) {
    std::lock_guard lock(mutex_);
    trackers_.push_back(std::move(tracker));
  }

  uint64_t malloc(size_t requested, void* stream, std::string& error) {
    std::lock_guard lock(mutex_);
    size_t size = round_size(requested);
    bool small = size <= kSmallSize;
    bool expandable = expandable_segments && !small;
    Block* block = find_free(size, small, expandable);
    if (!block) block = expandable ? grow_expandable(size) : new_segment(size, small);
    if (!block) {
      release_cached();  // as PyTorch does: free what is cached, try again
      block = expandable ? grow_expandable(size) : new_segment(size, small);
    }
    if (!block) {
      size_t free_bytes = 0, total = 0;
      cudaMemGetInfo(&free_bytes, &total);
      trace(TraceEntry::OOM, free_bytes, size, stream);
      ++stats_.ooms;
      char text[256];
      std::snprintf(text, sizeof text,
                    "CUDA out of memory. Tried to allocate %.2f MiB. GPU %d has a total capacity of %.2f MiB of which "
                    "%.2f MiB is free.",
                    requested / 1048576.0, device_, total / 1048576.0, free_bytes / 1048576.0);
      error = text;
      return 0;
    }
    split(*block, size);
    block->allocated = true;
    stats_.allocated += block->size;
    stats_.allocated_peak = std::max(stats_.allocated_peak, stats_.allocated);
    ++stats_.allocations;
    trace(TraceEntry::ALLOC, block->addr, block->size, stream);
    return block->addr;
  }

  bool free(uint64_t addr, bool wait_for_streams) {
    std::lock_guard lock(mutex_);
    auto it = blocks_.find(addr);
    if (it == blocks_.end() || !it->second.allocated) return false;
    Block& b = it->second;
    b.allocated = false;
    stats_.allocated -= b.size;
    trace(TraceEntry::FREE_REQUESTED, b.addr, b.size, nullptr);
    if (wait_for_streams)
      b.pending = true;  // record_stream: back in the cache once those streams are done
    else
      complete_free(addr);
    return true;
  }

  void synchronize() {
    std::lock_guard lock(mutex_);
    std::vector<uint64_t> done;
    for (auto& [addr, b] : blocks_)
      if (b.pending) done.push_back(addr);
    for (uint64_t addr : done) complete_free(addr);
  }

  void empty_cache() {
    std::lock_guard lock(mutex_);
    release_cached();
  }

  Stats stats() {
    std::lock_guard lock(mutex_);
    return stats_;
  }
  void reset_peaks() {
    std::lock_guard lock(mutex_);
    stats_.allocated_peak = stats_.allocated;
    stats_.reserved_peak = stats_.reserved;
  }

  static inline bool expandable_segments = false;

 private:
  void trace(TraceEntry::Action action, uint64_t addr, uint64_t size, void* stream) {
    if (trackers_.empty()) return;
    // For the test of a TraceEntry memtrace reads wrong: segments reported off by some bytes.
    static const uint64_t skew = [] {
      const char* s = std::getenv("SIM_TORCH_SKEW_SEGMENTS");
      return s ? std::strtoull(s, nullptr, 10) : 0ull;
    }();
    if (action == TraceEntry::SEGMENT_ALLOC || action == TraceEntry::SEGMENT_MAP) addr += skew;
    TraceEntry e;
    e.action_ = action;
    e.device_ = device_;
    e.addr_ = addr;
    e.stream_ = stream;
    e.size_ = size;
    e.compile_context_ = "N/A";
    for (const auto& tracker : trackers_) tracker(e);
  }

  Block* find_free(size_t size, bool small, bool expandable) {
    Block* best = nullptr;
    for (auto& [addr, b] : blocks_)
      if (!b.allocated && !b.pending && b.small == small && b.expandable == expandable && b.size >= size &&
          (!best || b.size < best->size))
        best = &b;
    return best;
  }

  Block* new_segment(size_t size, bool small) {
    size_t bytes = small ? kSmallBuffer : segment_size(size);
    void* ptr = nullptr;
    if (cudaMalloc(&ptr, bytes) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    auto addr = reinterpret_cast<uint64_t>(ptr);
    stats_.reserved += bytes;
    stats_.reserved_peak = std::max(stats_.reserved_peak, stats_.reserved);
    ++stats_.segments;
    ++stats_.segments_allocated;
    trace(TraceEntry::SEGMENT_ALLOC, addr, bytes, nullptr);
    Block& b = blocks_[addr];
    b = Block{addr, bytes, small, false, false, false, addr, bytes};
    return &b;
  }

  // Maps pages at the end of the device's expandable segment until its free end holds SIZE.
  Block* grow_expandable(size_t size) {
    if (!va_) {
      auto reserve = driver<decltype(&cuMemAddressReserve)>("cuMemAddressReserve");
      CUdeviceptr va = 0;
      if (!reserve || reserve(&va, kExpandableReserve, 0, 0, 0) != CUDA_SUCCESS) return nullptr;  // as PyTorch reserves
      va_ = va;
    }
    Block* tail = expandable_tail();
    if (tail && (tail->allocated || tail->pending)) tail = nullptr;
    uint64_t have = tail ? tail->size : 0;
    size_t pages = (size - have + kPage - 1) / kPage;
    if (have >= size) pages = 0;
    auto create = driver<decltype(&cuMemCreate)>("cuMemCreate");
    auto map = driver<decltype(&cuMemMap)>("cuMemMap");
    auto set_access = driver<decltype(&cuMemSetAccess)>("cuMemSetAccess");
    auto release = driver<decltype(&cuMemRelease)>("cuMemRelease");
    if (!create || !map || !set_access || !release) return nullptr;
    uint64_t start = va_ + mapped_;
    for (size_t i = 0; i < pages; ++i) {
      CUmemAllocationProp prop{};
      prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
      prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      prop.location.id = device_;
      CUmemGenericAllocationHandle handle = 0;
      if (create(&handle, kPage, &prop, 0) != CUDA_SUCCESS) {
        if (i == 0) return nullptr;
        pages = i;  // what was mapped stays: the allocation fails below
        break;
      }
      uint64_t at = va_ + mapped_;
      map(at, kPage, 0, handle, 0);
      CUmemAccessDesc access{};
      access.location = prop.location;
      access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      set_access(at, kPage, &access, 1);
      handles_[at] = handle;
      mapped_ += kPage;
    }
    if (pages) {
      stats_.reserved += pages * kPage;
      stats_.reserved_peak = std::max(stats_.reserved_peak, stats_.reserved);
      ++stats_.segments_allocated;
      trace(TraceEntry::SEGMENT_MAP, start, pages * kPage, nullptr);
      if (tail) {
        tail->size += pages * kPage;
      } else {
        Block& b = blocks_[start];
        b = Block{start, pages * kPage, false, false, true, false, 0, 0};
        tail = &b;
      }
    }
    return tail && tail->size >= size ? tail : nullptr;
  }

  void split(Block& b, size_t size) {
    size_t rest = b.size - size;
    if (rest < (b.small ? kMinBlock : kSmallSize + 1)) return;
    Block& after = blocks_[b.addr + size];
    after = Block{b.addr + size, rest, b.small, false, b.expandable, false, b.segment, b.segment_bytes};
    b.size = size;
  }

  void complete_free(uint64_t addr) {
    Block& b = blocks_.at(addr);
    b.pending = false;
    trace(TraceEntry::FREE_COMPLETED, b.addr, b.size, nullptr);
    merge(addr);
  }

  // Joins the free block at ADDR with free neighbours of its segment.
  void merge(uint64_t addr) {
    auto it = blocks_.find(addr);
    auto next = std::next(it);
    if (next != blocks_.end() && mergeable(it->second, next->second)) {
      it->second.size += next->second.size;
      blocks_.erase(next);
    }
    if (it != blocks_.begin()) {
      auto prev = std::prev(it);
      if (mergeable(prev->second, it->second)) {
        prev->second.size += it->second.size;
        blocks_.erase(it);
      }
    }
  }
  static bool mergeable(const Block& a, const Block& b) {
    return !a.allocated && !a.pending && !b.allocated && !b.pending && a.addr + a.size == b.addr &&
           a.expandable == b.expandable && a.segment == b.segment && a.small == b.small;
  }

  // Frees every cached segment that is whole (not split), and unmaps the expandable segment's
  // free pages at its end.
  void release_cached() {
    for (auto it = blocks_.begin(); it != blocks_.end();) {
      const Block& b = it->second;
      if (b.expandable || b.addr != b.segment || b.size != b.segment_bytes || b.allocated || b.pending) {
        ++it;
        continue;
      }
      trace(TraceEntry::SEGMENT_FREE, b.addr, b.size, nullptr);
      cudaFree(reinterpret_cast<void*>(b.addr));
      stats_.reserved -= b.size;
      --stats_.segments;
      it = blocks_.erase(it);
    }
    Block* last = expandable_tail();
    if (!last || last->allocated || last->pending) return;
    uint64_t keep = (last->addr - va_ + kPage - 1) / kPage * kPage;  // a page the block only partly covers stays
    if (keep >= mapped_) return;
    uint64_t from = va_ + keep, bytes = mapped_ - keep;
    trace(TraceEntry::SEGMENT_UNMAP, from, bytes, nullptr);
    auto unmap = driver<decltype(&cuMemUnmap)>("cuMemUnmap");
    auto release = driver<decltype(&cuMemRelease)>("cuMemRelease");
    for (uint64_t at = from; at < va_ + mapped_; at += kPage) {
      if (unmap) unmap(at, kPage);
      if (release) release(handles_[at]);
      handles_.erase(at);
    }
    mapped_ = keep;
    stats_.reserved -= bytes;
    if (last->addr >= from)
      blocks_.erase(last->addr);
    else
      last->size = from - last->addr;
  }

  // The expandable segment's last block: the one that ends where its mapped pages end.
  Block* expandable_tail() {
    if (!va_ || !mapped_) return nullptr;
    auto it = blocks_.lower_bound(va_ + mapped_);
    if (it == blocks_.begin()) return nullptr;
    Block& b = std::prev(it)->second;
    return b.expandable && b.addr + b.size == va_ + mapped_ ? &b : nullptr;
  }

  DeviceIndex device_;
  std::recursive_mutex mutex_;
  std::vector<AllocatorTraceTracker> trackers_;
  std::map<uint64_t, Block> blocks_;
  Stats stats_;
  uint64_t va_ = 0, mapped_ = 0;
  std::map<uint64_t, CUmemGenericAllocationHandle> handles_;
};

class NativeCachingAllocator : public CUDAAllocator {
 public:
  std::vector<DeviceCachingAllocator*> devices;

  DeviceCachingAllocator* of(uint64_t addr) {
    std::lock_guard lock(owners_mutex_);
    auto it = owners_.find(addr);
    return it == owners_.end() ? nullptr : devices[static_cast<size_t>(it->second)];
  }
  uint64_t malloc(size_t size, int device, void* stream, std::string& error) {
    if (device < 0 || static_cast<size_t>(device) >= devices.size()) {
      error = "invalid device";
      return 0;
    }
    uint64_t addr = devices[static_cast<size_t>(device)]->malloc(size, stream, error);
    if (addr) {
      std::lock_guard lock(owners_mutex_);
      owners_[addr] = device;
    }
    return addr;
  }
  bool free(uint64_t addr, bool wait) {
    DeviceCachingAllocator* d = of(addr);
    if (!d || !d->free(addr, wait)) return false;
    std::lock_guard lock(owners_mutex_);
    owners_.erase(addr);
    return true;
  }

  void* raw_alloc(size_t) override { return nullptr; }
  void* raw_alloc_with_stream(size_t, void*) override { return nullptr; }
  void raw_delete(void*) override {}
  void init(int device_count) override {
    while (devices.size() < static_cast<size_t>(device_count))
      devices.push_back(new DeviceCachingAllocator(static_cast<DeviceIndex>(devices.size())));
  }
  bool initialized() override { return !devices.empty(); }
  double getMemoryFraction(DeviceIndex) override { return 1; }
  void setMemoryFraction(double, DeviceIndex) override {}
  void emptyCache() override {
    for (auto* d : devices) d->empty_cache();
  }
  void enable(bool) override {}
  bool isEnabled() const override { return true; }
  void cacheInfo(DeviceIndex, size_t*) override {}
  void* getBaseAllocation(void* ptr, size_t*) override { return ptr; }
  void recordStream(void*, void*) override {}
  void resetAccumulatedStats(DeviceIndex) override {}
  void resetPeakStats(DeviceIndex device) override { devices.at(static_cast<size_t>(device))->reset_peaks(); }
  void beginAllocateToPool(DeviceIndex, MempoolId_t) override {}
  void endAllocateToPool(DeviceIndex, MempoolId_t) override {}
  void releasePool(DeviceIndex, MempoolId_t) override {}
  std::shared_ptr<void> getIpcDevPtr(std::string) override { return nullptr; }
  bool isHistoryEnabled() override { return false; }
  void recordHistory(bool, size_t) override {}
  void attachOutOfMemoryObserver(std::function<void(int64_t, size_t, size_t, size_t)>) override {}
  // As PyTorch's: the trackers go to the device allocators that exist (init made them).
  void attachAllocatorTraceTracker(AllocatorTraceTracker tracker) override {
    for (auto* d : devices) d->attach(tracker);
  }
  void enablePeerAccess(DeviceIndex, DeviceIndex) override {}
  std::string name() override { return "native"; }

 private:
  std::mutex owners_mutex_;
  std::map<uint64_t, int> owners_;
};

NativeCachingAllocator* native() {
  static auto* instance = [] {
    auto* a = new NativeCachingAllocator();
    allocator.store(a);
    return a;
  }();
  return instance;
}

// Constructed when the library loads, as PyTorch's BackendInitializer does.
__attribute__((constructor)) void register_allocator() { native(); }

}  // namespace
}  // namespace Native
}  // namespace cuda::CUDACachingAllocator
}  // namespace c10

using namespace c10::cuda::CUDACachingAllocator::Native;

extern "C" {

SIM_TORCH_API int sim_torch_init(int device_count, int expandable_segments) {
  DeviceCachingAllocator::expandable_segments = expandable_segments != 0;
  native()->init(device_count);
  return 0;
}

// The address, or 0 with the message in ERROR (an OOM, as PyTorch words it).
SIM_TORCH_API uint64_t sim_torch_malloc(uint64_t size, int device, void* stream, char* error, size_t error_bytes) {
  std::string why;
  uint64_t addr = native()->malloc(size, device, stream, why);
  if (!addr && error && error_bytes) std::snprintf(error, error_bytes, "%s", why.c_str());
  return addr;
}

// WAIT_FOR_STREAMS: the tensor was used on another stream (record_stream): its block is back in
// the cache only at the next synchronize.
SIM_TORCH_API int sim_torch_free(uint64_t addr, int wait_for_streams) {
  return native()->free(addr, wait_for_streams != 0) ? 0 : -1;
}

SIM_TORCH_API void sim_torch_synchronize() {
  for (auto* d : native()->devices) d->synchronize();
}

SIM_TORCH_API void sim_torch_empty_cache() { native()->emptyCache(); }

// allocated, allocated peak, reserved, reserved peak, segments, OOMs, allocations, segments ever.
SIM_TORCH_API void sim_torch_stats(int device, uint64_t* out) {
  auto* a = native();
  if (device < 0 || static_cast<size_t>(device) >= a->devices.size()) return;
  Stats s = a->devices[static_cast<size_t>(device)]->stats();
  uint64_t values[] = {s.allocated, s.allocated_peak, s.reserved,    s.reserved_peak,
                       s.segments,  s.ooms,           s.allocations, s.segments_allocated};
  std::memcpy(out, values, sizeof values);
}

SIM_TORCH_API void sim_torch_reset_peak(int device) { native()->resetPeakStats(static_cast<c10::DeviceIndex>(device)); }

}  // extern "C"
