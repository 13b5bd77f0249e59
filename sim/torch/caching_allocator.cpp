// The stand-in libc10_cuda.so's native caching allocator: what PyTorch's does where memory is
// concerned, rule by rule from c10/cuda/CUDACachingAllocator.cpp (read at v2.6.0, exact; the same
// rules in the 2.2/2.3 and 2.5-era sources and in 2.9/2.10-era main unless said: where they
// differ, SIM_TORCH_MINOR picks the rule of the build's release) and c10/cuda/CUDAAllocatorConfig.cpp:
//   - round_size: up to 512 B, or to the next power-of-two division (roundup_power2_divisions);
//     requests up to 1 MiB come from the small pool (2 MiB segments), larger ones from the large
//     pool (20 MiB segments below 10 MiB, else the size rounded to 2 MiB: get_allocation_size);
//   - should_split: small pool, or expandable segments on: remaining >= 512 B; large pool:
//     remaining > 1 MiB (a smaller remainder stays in the block handed out);
//   - malloc: process_events, a free block of the pool and stream (best fit), else a new
//     segment, else release_cached_blocks and one more try (num_alloc_retries), else an OOM
//     (record_trace(OOM, device_free, rounded size), num_ooms, the observers outside the lock);
//   - record_trace: ALLOC with the requested size (orig_size), FREE_REQUESTED and FREE_COMPLETED
//     with block->requested_size, segments with their own sizes; trackers run under the device's
//     lock, before the history ring;
//   - stats: allocated_bytes moves by block->size (down at free), requested_bytes by the
//     requested size and active_bytes by block->size (down when the free completes);
//   - expandable segments: one per pool and stream, pages of 2 MiB (small) or 20 MiB (large),
//     cuMemCreate per page, SEGMENT_MAP/UNMAP for the pages mapped or unmapped, unmapped blocks
//     kept beside the free ones (map_block, unmap_block, release_blocks);
//   - private pools (torch.cuda.MemPool, 2.5 on: PR #133599): allocations while the pool is in
//     use go to its blocks; a pool with an allocator of its own gets its segments from that
//     allocator's raw_alloc instead of cudaMalloc (allocPrimitive), still SEGMENT_ALLOC, and
//     gives them back through raw_delete when the pool is released and emptied (~MemPool). Which
//     private pools use expandable segments: none up to 2.3 ("our checkpointing logic for private
//     pools doesn't support the expandable_segments_ structure yet"); all in 2.6 (outside fbcode);
//     those without an allocator of their own in 2.9-era main;
//   - snapshot(): each device's trace, then its segments, then a SNAPSHOT entry (device 0, address
//     0, the active bytes), which the next snapshot's trace begins with;
//   - the driver's VMM functions: dlsym on libcuda.so.1 opened RTLD_NOLOAD (c10/cuda/driver_api.cpp,
//     2.3, 2.6); cudaGetDriverEntryPointByVersion in 2.9-era main.
// The Python stand-in (python/torch) calls the C functions of c_api.cpp, with the GIL released.
#include "caching_allocator.h"

#include <cuda.h>
#include <dlfcn.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>

namespace c10 {

Allocator::~Allocator() = default;
void* Allocator::allocate_bytes(size_t) { return nullptr; }
void* Allocator::raw_deleter() const { return nullptr; }
void Allocator::copy_data(void* dest, const void* src, size_t count) const { std::memcpy(dest, src, count); }

namespace cuda::CUDACachingAllocator {

SIM_TORCH_API std::atomic<CUDAAllocator*> allocator{nullptr};

namespace Native {

constexpr size_t kMinBlockSize = 512, kSmallSize = 1048576, kSmallBuffer = 2097152, kLargeBuffer = 20971520,
                 kMinLargeAlloc = 10485760, kRoundLarge = 2097152;

// PYTORCH_CUDA_ALLOC_CONF, as CUDAAllocatorConfig parses what the stand-in needs of it.
const AllocatorConfig& config() {
  static const AllocatorConfig c = [] {
    AllocatorConfig c;
    const char* env = ::secure_getenv("PYTORCH_CUDA_ALLOC_CONF");
    std::string text = env ? env : "";
    text.erase(std::remove(text.begin(), text.end(), ' '), text.end());
    size_t at = 0;
    while (at <= text.size()) {
      size_t end = text.find(',', at);
      if (end == std::string::npos) end = text.size();
      std::string item = text.substr(at, end - at), key = item.substr(0, item.find(':'));
      std::string value = item.find(':') == std::string::npos ? "" : item.substr(item.find(':') + 1);
      if (key == "expandable_segments") c.expandable_segments = value == "True";
      if (key == "roundup_power2_divisions") c.roundup_power2_divisions = std::strtoull(value.c_str(), nullptr, 10);
      if (key == "backend") c.backend = value;
      at = end + 1;
    }
    return c;
  }();
  return c;
}

namespace {

// roundup_power2_next_division (v2.6.0): size up to the next of DIVISIONS steps between the
// powers of two around it.
size_t roundup_power2_next_division(size_t size, size_t divisions) {
  if ((size & (size - 1)) == 0) return size;
  size_t floor = size_t(1) << (63 - __builtin_clzll(size));
  size_t division = floor >> (63 - __builtin_clzll(divisions));
  if (division == 0) return floor << 1;
  return (size + division - 1) / division * division;
}

size_t round_size(size_t size) {
  if (size < kMinBlockSize) return kMinBlockSize;
  size_t divisions = config().roundup_power2_divisions;
  if (divisions > 1 && size > kMinBlockSize * divisions) return roundup_power2_next_division(size, divisions);
  return kMinBlockSize * ((size + kMinBlockSize - 1) / kMinBlockSize);
}

size_t get_allocation_size(size_t size) {
  if (size <= kSmallSize) return kSmallBuffer;
  if (size < kMinLargeAlloc) return kLargeBuffer;
  return kRoundLarge * ((size + kRoundLarge - 1) / kRoundLarge);
}

// c10/core/CachingDeviceAllocator.h format_size (v2.6.0).
std::string format_size(uint64_t size) {
  char text[64];
  if (size <= 1024)
    std::snprintf(text, sizeof text, "%llu bytes", static_cast<unsigned long long>(size));
  else if (size <= 1048576)
    std::snprintf(text, sizeof text, "%.2f KiB", size / 1024.0);
  else if (size <= 1073741824ull)
    std::snprintf(text, sizeof text, "%.2f MiB", size / 1048576.0);
  else
    std::snprintf(text, sizeof text, "%.2f GiB", size / 1073741824.0);
  return text;
}

uint64_t realtime_ns() {
  timespec t{};
  clock_gettime(CLOCK_REALTIME, &t);  // c10::getTime(): CLOCK_REALTIME
  return static_cast<uint64_t>(t.tv_sec) * 1000000000ull + static_cast<uint64_t>(t.tv_nsec);
}

template <typename Fn>
Fn driver(const char* name) {
  void* fn = nullptr;
#if SIM_TORCH_MINOR >= 9
  cudaDriverEntryPointQueryResult found{};
  cudaGetDriverEntryPointByVersion(name, &fn, 12030, cudaEnableDefault, &found);
#else
  static void* libcuda = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);  // create_driver_api
  if (libcuda) fn = dlsym(libcuda, name);
#endif
  return reinterpret_cast<Fn>(fn);
}

// For the test of a TraceEntry memtrace reads wrong: segments reported off by some bytes.
uint64_t segment_skew() {
  static const uint64_t skew = [] {
    const char* s = ::secure_getenv("SIM_TORCH_SKEW_SEGMENTS");
    return s ? std::strtoull(s, nullptr, 10) : 0ull;
  }();
  return skew;
}

}  // namespace

// A virtual address range whose pages are mapped on demand (ExpandableSegment, v2.6.0).
struct ExpandableSegment {
  uint64_t base = 0, page = 0, pages = 0;
  int device = 0;
  std::vector<CUmemGenericAllocationHandle> handles;  // 0: not mapped

  bool reserve(int dev, uint64_t page_bytes) {
    device = dev;
    page = page_bytes;
    size_t free_bytes = 0, total = 0;
    cudaMemGetInfo(&free_bytes, &total);
    pages = (total + total / 8 + page - 1) / page;  // max_handles_
    auto reserve_range = driver<decltype(&cuMemAddressReserve)>("cuMemAddressReserve");
    CUdeviceptr va = 0;
    if (!reserve_range || reserve_range(&va, page * pages, 0, 0, 0) != CUDA_SUCCESS) return false;
    base = va;
    handles.assign(pages, 0);
    return true;
  }
  uint64_t end() const { return base + page * pages; }
  uint64_t left(uint64_t addr) const { return (addr - base) / page; }
  uint64_t right(uint64_t addr) const { return (addr - base + page - 1) / page; }

  // Maps the pages covering [addr, addr+size); the range mapped (from addr), or 0 bytes.
  uint64_t map(uint64_t addr, uint64_t size) {
    auto create = driver<decltype(&cuMemCreate)>("cuMemCreate");
    auto map_fn = driver<decltype(&cuMemMap)>("cuMemMap");
    auto set_access = driver<decltype(&cuMemSetAccess)>("cuMemSetAccess");
    auto release = driver<decltype(&cuMemRelease)>("cuMemRelease");
    uint64_t begin = left(addr), stop = right(addr + size);
    if (!create || !map_fn || !set_access || !release) return 0;
    for (uint64_t i = begin; i < stop; ++i) {
      CUmemAllocationProp prop{};
      prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
      prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      prop.location.id = device;
      CUmemGenericAllocationHandle handle = 0;
      if (create(&handle, page, &prop, 0) != CUDA_SUCCESS) {  // out of memory: release this call's pages
        for (uint64_t j = begin; j < i; ++j) {
          release(handles[j]);
          handles[j] = 0;
        }
        return 0;
      }
      handles[i] = handle;
    }
    for (uint64_t i = begin; i < stop; ++i) map_fn(base + i * page, page, 0, handles[i], 0);
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = device;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    set_access(base + begin * page, (stop - begin) * page, &access, 1);
    return (stop - begin) * page;
  }

  // Unmaps the whole pages inside [addr, addr+size); the range unmapped (start, bytes).
  std::pair<uint64_t, uint64_t> unmap(uint64_t addr, uint64_t size) {
    uint64_t begin = right(addr), stop = left(addr + size);
    if (begin >= stop) return {addr, 0};
    auto unmap_fn = driver<decltype(&cuMemUnmap)>("cuMemUnmap");
    auto release = driver<decltype(&cuMemRelease)>("cuMemRelease");
    cudaDeviceSynchronize();  // unmapHandles synchronizes the stream first
    for (uint64_t i = begin; i < stop; ++i) {
      if (unmap_fn) unmap_fn(base + i * page, page);
      if (release) release(handles[i]);
      handles[i] = 0;
    }
    return {base + begin * page, (stop - begin) * page};
  }

  void free_range() {
    if (auto address_free = driver<decltype(&cuMemAddressFree)>("cuMemAddressFree")) address_free(base, page * pages);
  }
};

namespace {

bool by_size(const Block* a, const Block* b) {
  if (a->stream != b->stream) return a->stream < b->stream;
  if (a->size != b->size) return a->size < b->size;
  return a->ptr < b->ptr;
}
bool by_address(const Block* a, const Block* b) {
  if (a->stream != b->stream) return a->stream < b->stream;
  return a->ptr < b->ptr;
}

}  // namespace

struct BlockPool {
  explicit BlockPool(bool small, PrivatePool* owner = nullptr) : is_small(small), owner_private_pool(owner) {}
  std::set<Block*, bool (*)(const Block*, const Block*)> blocks{by_size};
  std::set<Block*, bool (*)(const Block*, const Block*)> unmapped{by_address};
  const bool is_small;
  PrivatePool* const owner_private_pool;
};

struct PrivatePool {
  explicit PrivatePool(MempoolId_t pool_id, CUDAAllocator* pool_allocator)
      : id(pool_id), allocator(pool_allocator), large(false, this), small(true, this) {}
  MempoolId_t id;
  CUDAAllocator* allocator;  // a MemPool's own allocator (CUDAPluggableAllocator), or none
  BlockPool large, small;
  int use_count = 1;  // beginAllocateToPool's, less releasePool's: at 0, empty_cache frees its segments
};

DeviceCachingAllocator::DeviceCachingAllocator(DeviceIndex device)
    : device_(device), large_(new BlockPool(false)), small_(new BlockPool(true)) {}

void DeviceCachingAllocator::attach_tracker(AllocatorTraceTracker tracker) {
  std::lock_guard lock(mutex_);
  trackers_.push_back(std::move(tracker));
}

void DeviceCachingAllocator::attach_observer(OutOfMemoryObserver observer) {
  observers_.push_back(std::move(observer));
}

void DeviceCachingAllocator::record_history(bool enabled, int context_level, size_t max_entries) {
  std::lock_guard lock(mutex_);
  record_history_ = enabled;
  context_level_ = enabled ? context_level : 0;
  max_entries_ = max_entries ? max_entries : 1;
  if (!enabled) history_.clear();
}

void DeviceCachingAllocator::record_trace(TraceEntry::Action action, uint64_t addr, uint64_t size, void* stream,
                                          int64_t context, [[maybe_unused]] const BlockPool* pool,
                                          [[maybe_unused]] int device) {
  if (!record_history_ && trackers_.empty()) return;
  if (action == TraceEntry::SEGMENT_ALLOC || action == TraceEntry::SEGMENT_MAP) addr += segment_skew();
  TraceEntry e;
  e.action_ = action;
#if SIM_TORCH_MINOR >= 2
  e.device_ = static_cast<DeviceIndex>(device >= 0 ? device : device_);
  e.time_ = realtime_ns();  // PyTorch stores an approximate (TSC) time here, converted for snapshots
#endif
  e.addr_ = addr;
  e.stream_ = stream;
  e.size_ = size;
#if SIM_TORCH_MINOR >= 8
  // The pool of the block or segment the entry is about (record_trace's block->pool->owner_MempoolId(),
  // 2.8 on: PR #150683), {0, 0} for the default pool.
  e.mempool_ = pool && pool->owner_private_pool ? pool->owner_private_pool->id : MempoolId_t{0, 0};
  e.compile_context_ = "N/A";
#endif
  for (const auto& tracker : trackers_) tracker(e);
  if (record_history_) {
    history_.push_back(HistoryEntry{action, addr, size, reinterpret_cast<uint64_t>(stream), realtime_ns() / 1000,
                                    context_level_ >= 2 ? context : 0});
    if (history_.size() > max_entries_) history_.pop_front();
  }
}

BlockPool& DeviceCachingAllocator::pool_for(size_t size) {
  if (active_pool_) return size <= kSmallSize ? active_pool_->small : active_pool_->large;
  return size <= kSmallSize ? *small_ : *large_;
}

// alloc_block: which pools take expandable segments (see the top).
bool DeviceCachingAllocator::expandable_for(const BlockPool& pool) const {
  if (!config().expandable_segments) return false;
#if SIM_TORCH_MINOR <= 3
  return !pool.owner_private_pool;
#elif SIM_TORCH_MINOR >= 9
  return !(pool.owner_private_pool && pool.owner_private_pool->allocator);  // !active_user_pool
#else
  return true;
#endif
}

bool DeviceCachingAllocator::should_split(const Block* block, size_t size) const {
  size_t remaining = block->size - size;
#if SIM_TORCH_MINOR >= 9
  const bool expandable = expandable_for(*block->pool);  // the pool's own (is_expandable_segments_active)
#else
  const bool expandable = config().expandable_segments;
#endif
  if (block->pool->is_small || expandable) return remaining >= kMinBlockSize;
  return remaining > kSmallSize;  // size < max_split_size, which is unlimited unless configured
}

Block* DeviceCachingAllocator::get_free_block(BlockPool& pool, size_t size, void* stream) {
  Block key;
  key.stream = stream;
  key.size = size;
  auto it = pool.blocks.lower_bound(&key);
  if (it == pool.blocks.end() || (*it)->stream != stream) return nullptr;
  Block* block = *it;
  pool.blocks.erase(it);
  return block;
}

// A new segment from cudaMalloc, or from the private pool's own allocator (allocPrimitive).
Block* DeviceCachingAllocator::alloc_block(BlockPool& pool, size_t size, size_t alloc_size, void* stream, bool retry,
                                           int64_t context) {
  if (retry) ++stats_.num_alloc_retries;
  if (expandable_for(pool)) return try_allocate_expandable_block(pool, size, stream, context);
  void* ptr = nullptr;
  if (pool.owner_private_pool && pool.owner_private_pool->allocator) {
    ptr = pool.owner_private_pool->allocator->raw_alloc(alloc_size);
  } else if (cudaMalloc(&ptr, alloc_size) != cudaSuccess) {
    cudaGetLastError();
    ptr = nullptr;
  }
  if (!ptr) return nullptr;
  auto* block = new Block;
  block->device = device_;
  block->stream = stream;
  block->size = alloc_size;
  block->pool = &pool;
  block->ptr = reinterpret_cast<uint64_t>(ptr);
  block->segment_context = context;
  stats_.segment.increase(1, pool.is_small);
  stats_.reserved_bytes.increase(alloc_size, pool.is_small);
  ++stats_.num_device_alloc;
  record_trace(TraceEntry::SEGMENT_ALLOC, block->ptr, alloc_size, stream, context, &pool);
  return block;
}

// A new expandable segment for POOL and STREAM (find_expandable_block's last resort): its whole
// range one unmapped block.
Block* DeviceCachingAllocator::new_expandable_segment(BlockPool& pool, void* stream) {
  auto* segment = new ExpandableSegment;
  if (!segment->reserve(device_, pool.is_small ? kSmallBuffer : kLargeBuffer)) {
    delete segment;
    return nullptr;
  }
  expandable_.push_back(segment);
  auto* unmapped = new Block;
  unmapped->device = device_;
  unmapped->stream = stream;
  unmapped->size = segment->end() - segment->base;
  unmapped->pool = &pool;
  unmapped->ptr = segment->base;
  unmapped->mapped = false;
  unmapped->segment = segment;
  pool.unmapped.insert(unmapped);
  return unmapped;
}

// find_expandable_block: the lowest unmapped block of the stream, with the free block before it,
// whose run of free and unmapped blocks holds SIZE.
Block* DeviceCachingAllocator::find_expandable_block(BlockPool& pool, size_t size, void* stream) {
  auto allocatable = [](const Block* b) { return b && !b->allocated && !b->pending; };
  auto room = [&](const Block* b) {
    size_t bytes = 0;
    while (bytes < size && allocatable(b)) {
      bytes += b->size;
      b = b->next;
    }
    return bytes >= size;
  };
  for (Block* c : pool.unmapped) {
    if (c->stream != stream) continue;
    if (allocatable(c->prev)) c = c->prev;
    if (room(c)) return c;
  }
  Block* fresh = new_expandable_segment(pool, stream);
  return fresh && room(fresh) ? fresh : nullptr;
}

Block* DeviceCachingAllocator::try_allocate_expandable_block(BlockPool& pool, size_t size, void* stream,
                                                             int64_t context) {
  Block* candidate = find_expandable_block(pool, size, stream);
  if (!candidate) return nullptr;
  if (!candidate->mapped && !(candidate = map_block(candidate, std::min<size_t>(candidate->size, size), context)))
    return nullptr;
  while (candidate->size < size) {
    Block* next = candidate->next;
    if (!(candidate = map_block(next, std::min<size_t>(size - candidate->size, next->size), context))) return nullptr;
  }
  pool.blocks.erase(candidate);
  return candidate;
}

// Maps the pages under the first SIZE bytes of the unmapped block TO_MAP; the free block that
// results (merged with its free neighbours), or null when the device has no room.
Block* DeviceCachingAllocator::map_block(Block* to_map, size_t size, int64_t context) {
  BlockPool& pool = *to_map->pool;
  uint64_t mapped = to_map->segment->map(to_map->ptr, size);
  if (mapped == 0) return nullptr;
  pool.unmapped.erase(to_map);
  to_map->mapped = true;
  if (mapped < to_map->size) {
    auto* remaining = new Block(*to_map);
    remaining->size = to_map->size - mapped;
    remaining->ptr = to_map->ptr + mapped;
    remaining->mapped = false;
    remaining->prev = to_map;
    remaining->next = to_map->next;
    if (to_map->next) to_map->next->prev = remaining;
    to_map->next = remaining;
    pool.unmapped.insert(remaining);
    to_map->size = mapped;
  }
  const uint64_t start = to_map->ptr;
  try_merge_blocks(to_map, to_map->prev, pool);
  try_merge_blocks(to_map, to_map->next, pool);
  pool.blocks.insert(to_map);
  stats_.reserved_bytes.increase(mapped, pool.is_small);
  ++stats_.num_device_alloc;
  record_trace(TraceEntry::SEGMENT_MAP, start, mapped, to_map->stream, context, &pool);
  return to_map;
}

void DeviceCachingAllocator::unmap_block(Block* block) {
  auto [start, bytes] = block->segment->unmap(block->ptr, block->size);
  if (bytes == 0) return;
  BlockPool& pool = *block->pool;
  pool.blocks.erase(block);
  auto split_off = [&](uint64_t ptr, uint64_t size, bool before) {
    auto* b = new Block(*block);
    b->ptr = ptr;
    b->size = size;
    if (before) {
      b->prev = block->prev;
      b->next = block;
      if (block->prev) block->prev->next = b;
      block->prev = b;
    } else {
      b->prev = block;
      b->next = block->next;
      if (block->next) block->next->prev = b;
      block->next = b;
    }
    pool.blocks.insert(b);
  };
  if (start > block->ptr) split_off(block->ptr, start - block->ptr, true);
  if (block->ptr + block->size > start + bytes)
    split_off(start + bytes, block->ptr + block->size - start - bytes, false);
  block->ptr = start;
  block->size = bytes;
  block->mapped = false;
  try_merge_blocks(block, block->prev, pool);
  try_merge_blocks(block, block->next, pool);
  pool.unmapped.insert(block);
  stats_.reserved_bytes.decrease(bytes, pool.is_small);
  ++stats_.num_device_free;
  record_trace(TraceEntry::SEGMENT_UNMAP, start, bytes, block->stream, 0, &pool);
}

// Merges SRC into DST when SRC is free (and mapped alike); the bytes it took in.
size_t DeviceCachingAllocator::try_merge_blocks(Block* dst, Block* src, BlockPool& pool) {
  if (!src || src->allocated || src->pending || dst->mapped != src->mapped) return 0;
  if (dst->prev == src) {
    dst->ptr = src->ptr;
    dst->prev = src->prev;
    if (dst->prev) dst->prev->next = dst;
  } else {
    dst->next = src->next;
    if (dst->next) dst->next->prev = dst;
  }
  size_t subsumed = src->size;
  dst->size += subsumed;
  (src->mapped ? pool.blocks : pool.unmapped).erase(src);
  delete src;
  return subsumed;
}

uint64_t DeviceCachingAllocator::malloc(size_t orig_size, void* stream, int64_t context, std::string& error) {
  std::unique_lock lock(mutex_);
  if (!active_pool_) process_events();
  const size_t size = round_size(orig_size);
  BlockPool& pool = pool_for(size);
  const size_t alloc_size = get_allocation_size(size);
  Block* block = get_free_block(pool, size, stream);
  if (!block) block = alloc_block(pool, size, alloc_size, stream, false, context);
  if (!block && !active_pool_ && release_cached_blocks())
    block = alloc_block(pool, size, alloc_size, stream, true, context);
  if (!block) {
    size_t device_free = 0, device_total = 0;
    cudaMemGetInfo(&device_free, &device_total);
    record_trace(TraceEntry::OOM, device_free, size, stream, context, &pool);
    ++stats_.num_ooms;
    std::vector<OutOfMemoryObserver> observers = observers_;
    lock.unlock();
    for (const auto& observer : observers) observer(device_, alloc_size, device_total, device_free);
    const int64_t allocated = stats_.allocated_bytes.all.current, reserved = stats_.reserved_bytes.all.current;
    error = "CUDA out of memory. Tried to allocate " + format_size(alloc_size) + ". GPU " + std::to_string(device_) +
            " has a total capacity of " + format_size(device_total) + " of which " + format_size(device_free) +
            " is free. Of the allocated memory " + format_size(allocated) + " is allocated by PyTorch, and " +
            format_size(reserved - allocated) +
            " is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
            "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)";
    return 0;
  }
  // alloc_found_block
  if (should_split(block, size)) {
    auto* rest = new Block(*block);
    rest->ptr = block->ptr + size;
    rest->size = block->size - size;
    rest->prev = block;
    rest->next = block->next;
    if (block->next) block->next->prev = rest;
    block->next = rest;
    block->size = size;
    pool.blocks.insert(rest);
  }
  block->allocated = true;
  block->requested_size = orig_size;
  block->context = context;
  record_trace(TraceEntry::ALLOC, block->ptr, orig_size, stream, context, block->pool);
  stats_.allocation.increase(1, pool.is_small);
  stats_.allocated_bytes.increase(block->size, pool.is_small);
  stats_.active.increase(1, pool.is_small);
  stats_.active_bytes.increase(block->size, pool.is_small);
  stats_.requested_bytes.increase(block->requested_size, pool.is_small);
  live_[block->ptr] = block;
  return block->ptr;
}

bool DeviceCachingAllocator::free(uint64_t addr, bool record_stream) {
  std::lock_guard lock(mutex_);
  auto it = live_.find(addr);
  if (it == live_.end()) return false;
  Block* block = it->second;
  live_.erase(it);
  block->allocated = false;
  stats_.allocation.decrease(1, block->pool->is_small);
  stats_.allocated_bytes.decrease(block->size, block->pool->is_small);
  record_trace(TraceEntry::FREE_REQUESTED, block->ptr, block->requested_size, block->stream, block->context,
               block->pool);
  if (record_stream) {
    block->pending = true;  // insert_events: back in the pool once the events recorded on its streams are done
    pending_.push_back(block);
  } else
    free_block(block);
  return true;
}

void DeviceCachingAllocator::free_block(Block* block) {
  record_trace(TraceEntry::FREE_COMPLETED, block->ptr, block->requested_size, block->stream, block->context,
               block->pool);
  block->pending = false;
  block->context = 0;
  const size_t original_size = block->size, requested = block->requested_size;
  BlockPool& pool = *block->pool;
  try_merge_blocks(block, block->prev, pool);
  try_merge_blocks(block, block->next, pool);
  pool.blocks.insert(block);
  stats_.active.decrease(1, pool.is_small);
  stats_.active_bytes.decrease(original_size, pool.is_small);
  stats_.requested_bytes.decrease(requested, pool.is_small);
}

// process_events: the simulated device runs nothing, so every event recorded on a stream is done
// by the next malloc.
void DeviceCachingAllocator::process_events() {
  std::vector<Block*> done;
  done.swap(pending_);
  for (Block* b : done) free_block(b);
}

std::vector<BlockPool*> DeviceCachingAllocator::all_pools() {
  std::vector<BlockPool*> pools{large_, small_};
  for (auto& [id, p] : private_pools_) {
    pools.push_back(&p->large);
    pools.push_back(&p->small);
  }
  return pools;
}

// Every block of the pool: the free ones it holds and the ones beside them in their segments.
std::vector<Block*> DeviceCachingAllocator::all_blocks(BlockPool& pool) {
  std::set<Block*> seen;
  std::vector<Block*> out;
  auto walk = [&](Block* b) {
    while (b->prev) b = b->prev;
    for (; b; b = b->next)
      if (seen.insert(b).second) out.push_back(b);
  };
  for (Block* b : pool.blocks) walk(b);
  for (Block* b : pool.unmapped) walk(b);
  for (auto& [ptr, b] : live_)
    if (b->pool == &pool) walk(b);
  return out;
}

bool DeviceCachingAllocator::release_cached_blocks() {
  process_events();  // synchronize_and_free_events
  release_blocks(*large_);
  release_blocks(*small_);
  for (auto it = private_pools_.begin(); it != private_pools_.end();) {  // graph_pools_freeable
    PrivatePool& pool = *it->second;
    if (pool.use_count > 0 || &pool == active_pool_) {
      ++it;
      continue;
    }
    release_blocks(pool.large);
    release_blocks(pool.small);
    bool empty = pool.large.blocks.empty() && pool.small.blocks.empty() && pool.large.unmapped.empty() &&
                 pool.small.unmapped.empty() && std::none_of(live_.begin(), live_.end(), [&](const auto& b) {
                   return b.second->pool->owner_private_pool == &pool;
                 });
    it = empty ? private_pools_.erase(it) : std::next(it);
  }
  return true;
}

void DeviceCachingAllocator::release_blocks(BlockPool& pool) {
  std::vector<Block*> to_unmap, to_release;
  for (Block* b : pool.blocks) {
    if (b->segment)
      to_unmap.push_back(b);
    else if (!b->prev && !b->next)
      to_release.push_back(b);
  }
  for (Block* b : to_release) release_block(b);
  for (Block* b : to_unmap) {
    unmap_block(b);
    if (!b->prev && !b->next && !b->mapped) release_expandable_segment(b);
  }
}

void DeviceCachingAllocator::release_block(Block* block) {
  BlockPool& pool = *block->pool;
  record_trace(TraceEntry::SEGMENT_FREE, block->ptr, block->size, block->stream, block->segment_context, &pool);
  if (pool.owner_private_pool && pool.owner_private_pool->allocator)
    pool.owner_private_pool->allocator->raw_delete(reinterpret_cast<void*>(block->ptr));
  else
    cudaFree(reinterpret_cast<void*>(block->ptr));
  stats_.segment.decrease(1, pool.is_small);
  stats_.reserved_bytes.decrease(block->size, pool.is_small);
  ++stats_.num_device_free;
  pool.blocks.erase(block);
  delete block;
}

void DeviceCachingAllocator::release_expandable_segment(Block* block) {
  expandable_.erase(std::find(expandable_.begin(), expandable_.end(), block->segment));
  block->segment->free_range();
  delete block->segment;
  block->pool->unmapped.erase(block);
  delete block;
}

void DeviceCachingAllocator::empty_cache() {
  std::lock_guard lock(mutex_);
  release_cached_blocks();
}

DeviceStats DeviceCachingAllocator::stats() {
  std::lock_guard lock(mutex_);
  return stats_;
}

void DeviceCachingAllocator::reset_peak_stats() {
  std::lock_guard lock(mutex_);
  stats_.for_each([](Stat& s) { s.peak = s.current; });
}

void DeviceCachingAllocator::reset_accumulated_stats() {
  std::lock_guard lock(mutex_);
  stats_.for_each([](Stat& s) { s.allocated = s.freed = 0; });
  stats_.num_alloc_retries = stats_.num_ooms = stats_.num_device_alloc = stats_.num_device_free = 0;
}

// beginAllocateToPool with use_mem_pool's filter (every stream): the pool's blocks serve the
// allocations until endAllocateToPool.
void DeviceCachingAllocator::begin_pool(MempoolId_t id, CUDAAllocator* pool_allocator) {
  std::lock_guard lock(mutex_);
  auto& pool = private_pools_[id];
  if (!pool)
    pool = std::make_unique<PrivatePool>(id, pool_allocator);
  else
    ++pool->use_count;
  active_pool_ = pool.get();
}

// releasePool: the pool's segments are freeable once nothing uses it (graph_pools_freeable).
void DeviceCachingAllocator::release_pool(MempoolId_t id) {
  std::lock_guard lock(mutex_);
  if (auto it = private_pools_.find(id); it != private_pools_.end() && it->second->use_count > 0)
    --it->second->use_count;
}

void DeviceCachingAllocator::end_pool() {
  std::lock_guard lock(mutex_);
  active_pool_ = nullptr;
}

// This device's trace and segments, as THCPModule_memorySnapshot builds them
// (torch/csrc/cuda/Module.cpp): the trace read first, then the segments by address, then the
// SNAPSHOT entry (CCA's snapshot(): device 0, the active bytes). JSON, for the Python stand-in to
// turn into its dicts.
void DeviceCachingAllocator::snapshot(std::string& segments, std::string& trace) {
  std::lock_guard lock(mutex_);
  static const char* kActions[] = {"alloc",         "free_requested", "free_completed",
                                   "segment_alloc", "segment_free",   "segment_map",
                                   "segment_unmap", "snapshot",       "oom"};
  for (const HistoryEntry& h : history_) {
    char text[320];
    std::snprintf(text, sizeof text,
                  "%s{\"action\":\"%s\",\"%s\":%llu,\"size\":%llu,\"stream\":%llu,\"time_us\":%llu,"
                  "\"context\":%lld}",
                  trace.empty() ? "" : ",", kActions[h.action], h.action == TraceEntry::OOM ? "device_free" : "addr",
                  static_cast<unsigned long long>(h.addr), static_cast<unsigned long long>(h.size),
                  static_cast<unsigned long long>(h.stream), static_cast<unsigned long long>(h.time_us),
                  static_cast<long long>(h.context));
    trace += text;
  }
  auto state = [](const Block* b) {
    return b->allocated ? "active_allocated" : b->pending ? "active_pending_free" : "inactive";
  };
  std::map<uint64_t, std::string> by_address;
  uint64_t total_active = 0;
  for (BlockPool* pool : all_pools()) {
    std::vector<Block*> blocks = all_blocks(*pool);
    for (Block* head : blocks) {
      // A segment: a cudaMalloc'd chain, or each run of mapped blocks of an expandable segment.
      if (!head->mapped || (head->prev && (!head->segment || head->prev->mapped))) continue;
      uint64_t total = 0, allocated = 0, active = 0, requested = 0;
      std::string list;
      for (Block* b = head; b && b->mapped; b = b->next) {
        total += b->size;
        if (b->allocated) allocated += b->size;
        if (b->allocated || b->pending) {
          active += b->size;
          requested += b->requested_size;
        }
        char text[256];
        std::snprintf(text, sizeof text,
                      "%s{\"address\":%llu,\"size\":%llu,\"requested_size\":%llu,\"state\":\"%s\",\"context\":%lld}",
                      list.empty() ? "" : ",", static_cast<unsigned long long>(b->ptr),
                      static_cast<unsigned long long>(b->size),
                      static_cast<unsigned long long>(b->allocated || b->pending ? b->requested_size : 0), state(b),
                      static_cast<long long>(b->allocated || b->pending ? b->context : 0));
        list += text;
        if (!b->segment && !b->next) break;
      }
      total_active += active;
      char text[512];
      std::snprintf(text, sizeof text,
                    "{\"device\":%d,\"address\":%llu,\"total_size\":%llu,\"allocated_size\":%llu,"
                    "\"active_size\":%llu,\"requested_size\":%llu,\"stream\":%llu,\"segment_type\":\"%s\","
                    "\"segment_pool_id\":[%llu,%llu],\"is_expandable\":%s,\"context\":%lld,\"blocks\":[",
                    device_, static_cast<unsigned long long>(head->ptr), static_cast<unsigned long long>(total),
                    static_cast<unsigned long long>(allocated), static_cast<unsigned long long>(active),
                    static_cast<unsigned long long>(requested),
                    static_cast<unsigned long long>(reinterpret_cast<uint64_t>(head->stream)),
                    pool->is_small ? "small" : "large",
                    pool->owner_private_pool ? pool->owner_private_pool->id.first : 0ull,
                    pool->owner_private_pool ? pool->owner_private_pool->id.second : 0ull,
                    head->segment ? "true" : "false", static_cast<long long>(head->segment_context));
      by_address[head->ptr] = text + list + "]}";
    }
  }
  for (const auto& [addr, segment] : by_address) segments += (segments.empty() ? "" : ",") + segment;
  record_trace(TraceEntry::SNAPSHOT, 0, total_active, nullptr, 0, nullptr, /*device=*/0);
}

// As PyTorch's: the trackers and observers go to the device allocators that exist (init made them).
NativeCachingAllocator& NativeCachingAllocator::instance() {
  static auto* a = new NativeCachingAllocator();
  return *a;
}

uint64_t NativeCachingAllocator::malloc(size_t size, int device, void* stream, int64_t context, std::string& error) {
  if (device < 0 || static_cast<size_t>(device) >= devices.size()) {
    error = "invalid device ordinal";
    return 0;
  }
  uint64_t addr = devices[static_cast<size_t>(device)]->malloc(size, stream, context, error);
  if (addr) {
    std::lock_guard lock(owners_mutex_);
    owners_[addr] = device;
  }
  return addr;
}

// As PyTorch's NativeCachingAllocator::free (c10/cuda/CUDACachingAllocator.cpp, the same in every
// release the stand-in follows: read in 2.0's and in a 2.5-era copy, whose allocated_blocks are
// sharded by mutex): the pointer leaves the allocated blocks (get_allocated_block(ptr, true /*
// remove */)) before its block goes back to the device's pool, where another thread's malloc may
// take it at once; an unknown pointer is refused ("invalid device pointer").
bool NativeCachingAllocator::free(uint64_t addr, bool record_stream) {
  DeviceCachingAllocator* d = nullptr;
  {
    std::lock_guard lock(owners_mutex_);
    auto it = owners_.find(addr);
    if (it == owners_.end()) return false;
    d = devices[static_cast<size_t>(it->second)];
    owners_.erase(it);
  }
  return d->free(addr, record_stream);
}

void NativeCachingAllocator::init(int device_count) {
  while (devices.size() < static_cast<size_t>(device_count))
    devices.push_back(new DeviceCachingAllocator(static_cast<DeviceIndex>(devices.size())));
}
void NativeCachingAllocator::emptyCache() {
  for (auto* d : devices) d->empty_cache();
}
void NativeCachingAllocator::resetPeakStats(DeviceIndex device) {
  devices.at(static_cast<size_t>(device))->reset_peak_stats();
}
void NativeCachingAllocator::resetAccumulatedStats(DeviceIndex device) {
  devices.at(static_cast<size_t>(device))->reset_accumulated_stats();
}
void NativeCachingAllocator::recordHistory(bool enabled, size_t max_entries) {
  for (auto* d : devices) d->record_history(enabled, 2, max_entries);
}
void NativeCachingAllocator::attachOutOfMemoryObserver(OutOfMemoryObserver observer) {
  for (auto* d : devices) d->attach_observer(observer);
}
#if SIM_TORCH_MINOR >= 2
void NativeCachingAllocator::attachAllocatorTraceTracker(AllocatorTraceTracker tracker) {
  // For the test of a tracker that throws where memtrace calls it (SIM_TORCH_ATTACH_THROWS=1).
  if (const char* v = ::secure_getenv("SIM_TORCH_ATTACH_THROWS"); v && *v == '1')
    throw std::runtime_error("attachAllocatorTraceTracker refused (SIM_TORCH_ATTACH_THROWS)");
  for (auto* d : devices) d->attach_tracker(tracker);
}
#endif

// BackendStaticInitializer (CUDACachingAllocator.cpp, 2.2 to newest): at load time,
// PYTORCH_CUDA_ALLOC_CONF's backend (cudaMallocAsync) or the native allocator.
namespace {
__attribute__((constructor)) void backend_static_initializer() {
  CUDAAllocator* chosen = &NativeCachingAllocator::instance();
  if (config().backend == "cudaMallocAsync") chosen = async_allocator();
  allocator.store(chosen);
}
}  // namespace

}  // namespace Native
}  // namespace cuda::CUDACachingAllocator
}  // namespace c10
