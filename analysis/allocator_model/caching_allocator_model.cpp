// DeviceCachingAllocator's rules, from c10/cuda/CUDACachingAllocator.cpp read at v2.6.0 (exact;
// the same in the 2.2/2.3 and 2.5-era sources and in 2.9/2.10-era main unless said, where
// Release picks the rule of its release):
//   - round_size: up to 512 B, or to the next power-of-two division (roundup_power2_divisions
//     of the size's interval); requests up to 1 MiB come from the small pool (2 MiB segments),
//     larger ones from the large pool (20 MiB segments below 10 MiB, else the size rounded to
//     2 MiB: get_allocation_size);
//   - get_free_block: the pool's best fit for the stream; among expandable blocks, by the size
//     each can grow to; no block of max_split_size or more for a smaller request, and none
//     kLargeBuffer (max_non_split_rounding_mb in 2.6) or more above a request of max_split_size
//     or more;
//   - shouldSplit: small pool, or expandable segments on: remaining >= 512 B; large pool: the
//     request below max_split_size and remaining > 1 MiB;
//   - malloc: process_events (no capture underway), get_free_block, garbage_collect_cached_blocks
//     (a memory fraction set and garbage_collection_threshold), alloc_block, then
//     release_available_cached_blocks (max_split_size set) and alloc_block, then
//     release_cached_blocks and alloc_block (num_alloc_retries), else an OOM
//     (record_trace(OOM, device_free, rounded size), num_ooms);
//   - alloc_block: refused past the memory fraction (allowed_memory_maximum); expandable
//     segments where the pool takes them, else cudaMalloc (a MemPool's own allocator's raw_alloc);
//   - record_trace: ALLOC with the requested size, FREE_REQUESTED and FREE_COMPLETED with the
//     block's requested size, segments with their own sizes;
//   - stats: allocated_bytes moves by block->size (down at free), requested_bytes by the
//     requested size and active_bytes by block->size (down when the free completes);
//   - expandable segments: one per pool and stream, pages of 2 MiB (small) or 20 MiB (large),
//     address space for 1 1/8 of the device, SEGMENT_MAP/UNMAP for the pages mapped or unmapped
//     (map_block, unmap_block, release_blocks);
//   - private pools (CUDA graphs; torch.cuda.MemPool from 2.5, PR #133599): the pool in use
//     serves every allocation; its segments are released only once nothing uses it
//     (graph_pools_freeable). Which private pools use expandable segments: none up to 2.3 ("our
//     checkpointing logic for private pools doesn't support the expandable_segments_ structure
//     yet"); all in 2.6 (outside fbcode); those without an allocator of their own in 2.9-era main.
#include "memtrace/allocator_model/caching_allocator_model.h"

#include <algorithm>
#include <set>

namespace memtrace::torch_model {

namespace {

constexpr size_t kOneExaByte = size_t(1) << 60;
constexpr size_t kMinBlockSize = 512, kSmallSize = 1048576, kSmallBuffer = 2097152, kLargeBuffer = 20971520,
                 kMinLargeAlloc = 10485760, kRoundLarge = 2097152;

// roundup_power2_next_division (v2.6.0): SIZE up to the next of DIVISIONS steps between the
// powers of two around it.
size_t roundup_power2_next_division(size_t size, size_t divisions) {
  if ((size & (size - 1)) == 0) return size;
  size_t floor = size_t(1) << (63 - __builtin_clzll(size));
  size_t division = floor >> (63 - __builtin_clzll(divisions));
  if (division == 0) return floor << 1;
  return (size + division - 1) / division * division;
}

}  // namespace

struct BlockPool;
struct PrivatePool;

// A virtual address range whose pages are mapped on demand (ExpandableSegment, v2.6.0).
struct ExpandableSegment {
  uint64_t base = 0, page = 0, pages = 0;
  uint64_t end() const { return base + page * pages; }
  uint64_t left(uint64_t addr) const { return (addr - base) / page; }
  uint64_t right(uint64_t addr) const { return (addr - base + page - 1) / page; }
};

struct Block {
  uint64_t stream = 0;
  size_t size = 0, requested_size = 0;
  BlockPool* pool = nullptr;
  uint64_t ptr = 0;
  bool allocated = false, mapped = true;
  bool pending = false;  // freed, waiting for the events recorded on the streams that used it
  Block *prev = nullptr, *next = nullptr;
  ExpandableSegment* segment = nullptr;
  int64_t context = 0, segment_context = 0;
  uint64_t gc_count_base = 0;
  bool is_split() const { return prev || next; }
};

namespace {

bool by_size(const Block* a, const Block* b) {  // BlockComparatorSize
  if (a->stream != b->stream) return a->stream < b->stream;
  if (a->size != b->size) return a->size < b->size;
  return a->ptr < b->ptr;
}
bool by_address(const Block* a, const Block* b) {  // BlockComparatorAddress
  if (a->stream != b->stream) return a->stream < b->stream;
  return a->ptr < b->ptr;
}

}  // namespace

struct BlockPool {
  BlockPool(bool small, PrivatePool* owner = nullptr) : is_small(small), owner_private_pool(owner) {}
  std::set<Block*, bool (*)(const Block*, const Block*)> blocks{by_size};
  std::set<Block*, bool (*)(const Block*, const Block*)> unmapped{by_address};
  const bool is_small;
  PrivatePool* const owner_private_pool;
  uint64_t get_free_blocks_call_count = 0;
  // insert_into_blocks: a block's age for garbage collection counts from here.
  void insert(Block* b) {
    b->gc_count_base = get_free_blocks_call_count;
    blocks.insert(b);
  }
};

struct PrivatePool {
  PrivatePool(PoolId pool_id, bool own) : id(pool_id), own_allocator(own), large(false, this), small(true, this) {}
  PoolId id;
  bool own_allocator;  // a MemPool's own allocator (CUDAPluggableAllocator)
  BlockPool large, small;
  int use_count = 1;  // beginAllocateToPool's, less releasePool's: at 0, its segments may be released
};

struct CachingAllocatorModel::Impl {
  Impl(DeviceMemory& m, Options o, TraceListener* l)
      : memory(m),
        conf(std::move(o.conf)),
        release(o.release),
        streams_done_at_malloc(o.streams_done_at_malloc),
        listener(l) {}
  ~Impl() {
    std::set<Block*> all;
    for (BlockPool* pool : all_pools())
      for (Block* b : all_blocks(*pool)) all.insert(b);
    for (Block* b : all) delete b;
    for (ExpandableSegment* s : expandable) delete s;
  }

  DeviceMemory& memory;
  const AllocConf conf;
  const Release release;
  const bool streams_done_at_malloc;
  TraceListener* const listener;
  BlockPool large{false}, small{true};
  std::map<PoolId, std::unique_ptr<PrivatePool>> private_pools;
  PrivatePool* active_pool = nullptr;
  std::vector<ExpandableSegment*> expandable;
  std::map<uint64_t, Block*> live;  // allocated, or freed and waiting for its streams
  DeviceStats stats;
  bool set_fraction = false;
  size_t allowed_memory_maximum = 0;
  size_t total_allocated_memory = 0;  // what is reserved: segments and mapped pages

  void trace(Action action, uint64_t addr, uint64_t size, uint64_t stream, int64_t context, const BlockPool* pool) {
    if (listener)
      listener->on_trace(action, addr, size, stream, context,
                         pool && pool->owner_private_pool ? pool->owner_private_pool->id : PoolId{0, 0});
  }

  size_t round_size(size_t size) const {
    if (size < kMinBlockSize) return kMinBlockSize;
    size_t divisions = conf.divisions_for(size);
    // Up to 2.3 one division left the size as asked (roundup_power2_next_division returned it);
    // 2.4 on (PR #126830) rounds it to 512 B as no division does.
    if (release.minor <= 3 && divisions == 1 && size > kMinBlockSize) return size;
    if (divisions > 1 && size > kMinBlockSize * divisions) return roundup_power2_next_division(size, divisions);
    return kMinBlockSize * ((size + kMinBlockSize - 1) / kMinBlockSize);
  }

  BlockPool& pool_for(size_t size) {
    if (active_pool) return size <= kSmallSize ? active_pool->small : active_pool->large;
    return size <= kSmallSize ? small : large;
  }

  // alloc_block: which pools take expandable segments (see the top).
  bool expandable_for(const BlockPool& pool) const {
    if (!conf.expandable_segments) return false;
    if (release.minor <= 3) return !pool.owner_private_pool;
    if (release.minor >= 9) return !(pool.owner_private_pool && pool.owner_private_pool->own_allocator);
    return true;
  }

  bool should_split(const Block* block, size_t size) const {
    size_t remaining = block->size - size;
    // 2.9-era main asks the pool (is_expandable_segments_active); earlier releases the setting.
    const bool expandable = release.minor >= 9 ? expandable_for(*block->pool) : conf.expandable_segments;
    if (block->pool->is_small || expandable) return remaining >= kMinBlockSize;
    return size < conf.max_split_size && remaining > kSmallSize;
  }

  bool gc_enabled() const { return set_fraction && conf.garbage_collection_threshold > 0; }

  Block* get_free_block(BlockPool& pool, size_t size, uint64_t stream) {
    if (gc_enabled()) ++pool.get_free_blocks_call_count;  // blocks' ages count only where gc runs
    Block key;
    key.stream = stream;
    key.size = size;
    auto it = pool.blocks.lower_bound(&key);
    if (it == pool.blocks.end() || (*it)->stream != stream) return nullptr;
    if ((*it)->segment) {
      if (conf.expandable_segments) {
        // A block before unmapped pages is as large as it can grow: a better fit may come later.
        auto expandable_size = [](const Block* b) {
          return b->size + (b->next && !b->next->mapped ? b->next->size : 0);
        };
        auto next = std::next(it);
        while ((*it)->segment && next != pool.blocks.end() && (*next)->stream == stream &&
               expandable_size(*next) < expandable_size(*it))
          it = next++;
      } else {
        do ++it;
        while (it != pool.blocks.end() && (*it)->segment && (*it)->stream == stream);
        if (it == pool.blocks.end() || (*it)->stream != stream) return nullptr;
      }
    }
    if (size < conf.max_split_size && (*it)->size >= conf.max_split_size) return nullptr;  // oversized, small request
    // A block for a request of max_split_size or more may be larger by kLargeBuffer (2.3's source)
    // or by max_non_split_rounding_size (2.6.0's; PR #136174, September 2024: 2.5 not read), no more.
    const size_t rounding = release.minor >= 6 ? conf.max_non_split_rounding_size : kLargeBuffer;
    if (size >= conf.max_split_size && (*it)->size >= size + rounding) return nullptr;
    Block* block = *it;
    pool.blocks.erase(it);
    return block;
  }

  // A new segment: cudaMalloc'd (or the pool's own allocator's), or pages of an expandable one.
  Block* alloc_block(BlockPool& pool, size_t size, size_t alloc_size, uint64_t stream, bool retry, int64_t context) {
    if (retry) ++stats.num_alloc_retries;
    if (set_fraction && total_allocated_memory + alloc_size > allowed_memory_maximum) return nullptr;
    if (expandable_for(pool)) return try_allocate_expandable_block(pool, size, stream, context);
    const PoolId id = pool.owner_private_pool ? pool.owner_private_pool->id : PoolId{0, 0};
    uint64_t ptr = memory.allocate(alloc_size, id);
    if (!ptr) return nullptr;
    return new_segment(pool, ptr, alloc_size, stream, context, true);
  }

  Block* new_segment(BlockPool& pool, uint64_t ptr, size_t size, uint64_t stream, int64_t context, bool traced) {
    auto* block = new Block;
    block->stream = stream;
    block->size = size;
    block->pool = &pool;
    block->ptr = ptr;
    block->segment_context = context;
    total_allocated_memory += size;
    stats.segment.increase(1, pool.is_small);
    stats.reserved_bytes.increase(static_cast<int64_t>(size), pool.is_small);
    if (size >= conf.max_split_size) stats.oversize_segments.increase(1);
    if (traced) {
      ++stats.num_device_alloc;
      trace(Action::kSegmentAlloc, ptr, size, stream, context, &pool);
    }
    return block;
  }

  // A new expandable segment for POOL and STREAM: its whole range one unmapped block.
  Block* new_expandable_segment(BlockPool& pool, uint64_t stream) {
    const uint64_t page = pool.is_small ? kSmallBuffer : kLargeBuffer, total = memory.total_bytes();
    const uint64_t pages = (total + total / 8 + page - 1) / page;
    uint64_t base = memory.reserve_range(page * pages);
    if (!base) return nullptr;
    auto* segment = new ExpandableSegment{base, page, pages};
    expandable.push_back(segment);
    auto* unmapped = new Block;
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
  // whose run of free and unmapped blocks holds SIZE; else a new segment.
  Block* find_expandable_block(BlockPool& pool, size_t size, uint64_t stream) {
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

  Block* try_allocate_expandable_block(BlockPool& pool, size_t size, uint64_t stream, int64_t context) {
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
  Block* map_block(Block* to_map, size_t size, int64_t context) {
    BlockPool& pool = *to_map->pool;
    ExpandableSegment& s = *to_map->segment;
    const uint64_t first = s.left(to_map->ptr), stop = s.right(to_map->ptr + size);
    const uint64_t mapped = (stop - first) * s.page;
    if (!memory.map(s.base + first * s.page, mapped, s.page)) return nullptr;
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
    pool.insert(to_map);
    total_allocated_memory += mapped;
    stats.reserved_bytes.increase(static_cast<int64_t>(mapped), pool.is_small);
    ++stats.num_device_alloc;
    trace(Action::kSegmentMap, start, mapped, to_map->stream, context, &pool);
    if (!to_map->prev && !to_map->segment_context) to_map->segment_context = context;
    return to_map;
  }

  void unmap_block(Block* block) {
    ExpandableSegment& s = *block->segment;
    const uint64_t first = s.right(block->ptr), stop = s.left(block->ptr + block->size);
    if (first >= stop) return;  // no whole page inside it
    const uint64_t start = s.base + first * s.page, bytes = (stop - first) * s.page;
    memory.unmap(start, bytes, s.page);
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
      pool.insert(b);
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
    total_allocated_memory -= bytes;
    stats.reserved_bytes.decrease(static_cast<int64_t>(bytes), pool.is_small);
    ++stats.num_device_free;
    trace(Action::kSegmentUnmap, start, bytes, block->stream, 0, &pool);
  }

  // Merges SRC into DST when SRC is free (and mapped alike); the bytes it took in.
  size_t try_merge_blocks(Block* dst, Block* src, BlockPool& pool) {
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

  // alloc_found_block: the block split where should_split says, handed out.
  uint64_t hand_out(Block* block, BlockPool& pool, size_t size, size_t requested, uint64_t stream, int64_t context) {
    if (should_split(block, size)) {
      auto* rest = new Block(*block);
      rest->ptr = block->ptr + size;
      rest->size = block->size - size;
      rest->prev = block;
      rest->next = block->next;
      if (block->next) block->next->prev = rest;
      block->next = rest;
      block->size = size;
      pool.insert(rest);
    }
    block->allocated = true;
    block->requested_size = requested;
    block->context = context;
    trace(Action::kAlloc, block->ptr, requested, stream, context, block->pool);
    stats.allocation.increase(1, pool.is_small);
    stats.allocated_bytes.increase(static_cast<int64_t>(block->size), pool.is_small);
    stats.active.increase(1, pool.is_small);
    stats.active_bytes.increase(static_cast<int64_t>(block->size), pool.is_small);
    stats.requested_bytes.increase(static_cast<int64_t>(requested), pool.is_small);
    if (block->size >= conf.max_split_size) stats.oversize_allocations.increase(1);
    live[block->ptr] = block;
    return block->ptr;
  }

  uint64_t malloc(size_t requested, uint64_t stream, int64_t context, OutOfMemory* oom) {
    if (requested >= kOneExaByte) {  // NativeCachingAllocator::allocate: "more than 1EB memory", no trace
      if (oom) *oom = OutOfMemory{requested, memory.free_bytes(), memory.total_bytes()};
      return 0;
    }
    if (streams_done_at_malloc && !active_pool) process_events();
    const size_t size = round_size(requested);
    BlockPool& pool = pool_for(size);
    const size_t alloc_size = CachingAllocatorModel::allocation_size(size);
    Block* block = get_free_block(pool, size, stream);
    if (!block) {
      if (gc_enabled()) garbage_collect_cached_blocks();
      block = alloc_block(pool, size, alloc_size, stream, false, context);
      if (!block && release_available_cached_blocks(pool, size, stream))
        block = alloc_block(pool, size, alloc_size, stream, false, context);
      if (!block && !active_pool && release_cached_blocks())
        block = alloc_block(pool, size, alloc_size, stream, true, context);
    }
    if (!block) {
      const size_t device_free = memory.free_bytes(), device_total = memory.total_bytes();
      trace(Action::kOom, device_free, size, stream, context, &pool);
      ++stats.num_ooms;
      if (oom) *oom = OutOfMemory{alloc_size, device_free, device_total};
      return 0;
    }
    return hand_out(block, pool, size, requested, stream, context);
  }

  bool free(uint64_t addr, bool wait_for_streams) {
    auto it = live.find(addr);
    if (it == live.end() || !it->second->allocated) return false;
    Block* block = it->second;
    block->allocated = false;
    const bool is_small = block->pool->is_small;
    stats.allocation.decrease(1, is_small);
    stats.allocated_bytes.decrease(static_cast<int64_t>(block->size), is_small);
    trace(Action::kFreeRequested, block->ptr, block->requested_size, block->stream, block->context, block->pool);
    if (block->size >= conf.max_split_size) stats.oversize_allocations.decrease(1);
    if (wait_for_streams)
      block->pending = true;  // insert_events: back in its pool once its streams' events are done
    else
      free_block(block);
    return true;
  }

  bool complete_free(uint64_t addr) {
    auto it = live.find(addr);
    if (it == live.end() || !it->second->pending) return false;
    free_block(it->second);
    return true;
  }

  void free_block(Block* block) {
    trace(Action::kFreeCompleted, block->ptr, block->requested_size, block->stream, block->context, block->pool);
    live.erase(block->ptr);
    block->pending = false;
    block->context = 0;
    const size_t original_size = block->size, requested = block->requested_size;
    BlockPool& pool = *block->pool;
    try_merge_blocks(block, block->prev, pool);
    try_merge_blocks(block, block->next, pool);
    pool.insert(block);
    stats.active.decrease(1, pool.is_small);
    stats.active_bytes.decrease(static_cast<int64_t>(original_size), pool.is_small);
    stats.requested_bytes.decrease(static_cast<int64_t>(requested), pool.is_small);
  }

  void process_events() {
    std::vector<Block*> done;
    for (auto& [addr, b] : live)
      if (b->pending) done.push_back(b);
    for (Block* b : done) free_block(b);
  }

  // release_available_cached_blocks (max_split_size set): one cached oversize block of the pool
  // and stream at least the request (or max_split_size), else oversize ones from the largest
  // down until as many bytes are freed.
  bool release_available_cached_blocks(BlockPool& pool, size_t size, uint64_t stream) {
    if (conf.max_split_size == std::numeric_limits<size_t>::max()) return false;
    Block key;
    key.stream = stream;
    key.size = std::max(size, conf.max_split_size);
    // A block of max_split_size or more is never split in PyTorch, so each is a whole segment;
    // a state adopted from a recording may hold split ones: those stay.
    auto it = pool.blocks.lower_bound(&key);
    if (it == pool.blocks.end() || (*it)->stream != stream || (*it)->segment || (*it)->is_split()) {
      if (it == pool.blocks.begin()) return false;
      size_t released = 0;
      --it;
      while (released < key.size && (*it)->size >= conf.max_split_size && (*it)->stream == stream) {
        auto cur = it;
        const bool is_first = cur == pool.blocks.begin();
        if (!is_first) --it;
        if (!(*cur)->segment && !(*cur)->is_split()) {
          released += (*cur)->size;
          release_block(*cur);
        }
        if (is_first) break;
      }
      return released >= key.size;
    }
    release_block(*it);
    return true;
  }

  // garbage_collect_cached_blocks: whole cached blocks of the large pool, the oldest (by the
  // get_free_block calls since each came back) first, until reserved memory is below the
  // threshold's share of what is allowed.
  void garbage_collect_cached_blocks() {
    const size_t gc_threshold =
        static_cast<size_t>(conf.garbage_collection_threshold * static_cast<double>(allowed_memory_maximum));
    if (total_allocated_memory <= gc_threshold) return;
    const size_t target = total_allocated_memory - gc_threshold;
    size_t reclaimed = 0, total_age = 0;
    int freeable = 0;
    auto age = [&](const Block* b) { return large.get_free_blocks_call_count - b->gc_count_base; };
    for (Block* b : large.blocks)
      if (!b->is_split()) {
        total_age += age(b);
        ++freeable;
      }
    if (freeable == 0) return;
    bool freed = true;
    while (reclaimed < target && freed && freeable > 0) {
      const double age_threshold = static_cast<double>(total_age) / freeable;
      freed = false;
      for (auto it = large.blocks.begin(); it != large.blocks.end();) {
        Block* b = *it++;
        if (!b->is_split() && !b->segment && static_cast<double>(age(b)) >= age_threshold) {
          freed = true;
          reclaimed += b->size;
          total_age -= age(b);
          --freeable;
          release_block(b);
        }
      }
    }
  }

  std::vector<BlockPool*> all_pools() {
    std::vector<BlockPool*> pools{&large, &small};
    for (auto& [id, p] : private_pools) {
      pools.push_back(&p->large);
      pools.push_back(&p->small);
    }
    return pools;
  }

  // Every block of the pool: the free ones it holds and the ones beside them in their segments.
  std::vector<Block*> all_blocks(BlockPool& pool) const {
    std::set<Block*> seen;
    std::vector<Block*> out;
    auto walk = [&](Block* b) {
      while (b->prev) b = b->prev;
      for (; b; b = b->next)
        if (seen.insert(b).second) out.push_back(b);
    };
    for (Block* b : pool.blocks) walk(b);
    for (Block* b : pool.unmapped) walk(b);
    for (auto& [ptr, b] : live)
      if (b->pool == &pool) walk(b);
    return out;
  }

  bool release_cached_blocks() {
    process_events();  // synchronize_and_free_events
    release_blocks(large);
    release_blocks(small);
    for (auto it = private_pools.begin(); it != private_pools.end();) {  // graph_pools_freeable
      PrivatePool& pool = *it->second;
      if (pool.use_count > 0 || &pool == active_pool) {
        ++it;
        continue;
      }
      release_blocks(pool.large);
      release_blocks(pool.small);
      bool empty = pool.large.blocks.empty() && pool.small.blocks.empty() && pool.large.unmapped.empty() &&
                   pool.small.unmapped.empty() && std::none_of(live.begin(), live.end(), [&](const auto& b) {
                     return b.second->pool->owner_private_pool == &pool;
                   });
      it = empty ? private_pools.erase(it) : std::next(it);
    }
    return true;
  }

  void release_blocks(BlockPool& pool) {
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

  void release_block(Block* block) {
    BlockPool& pool = *block->pool;
    ++stats.num_device_free;
    trace(Action::kSegmentFree, block->ptr, block->size, block->stream, block->segment_context, &pool);
    memory.free(block->ptr, block->size, pool.owner_private_pool ? pool.owner_private_pool->id : PoolId{0, 0});
    total_allocated_memory -= block->size;
    stats.segment.decrease(1, pool.is_small);
    stats.reserved_bytes.decrease(static_cast<int64_t>(block->size), pool.is_small);
    if (block->size >= conf.max_split_size) stats.oversize_segments.decrease(1);
    pool.blocks.erase(block);
    delete block;
  }

  void release_expandable_segment(Block* block) {
    expandable.erase(std::find(expandable.begin(), expandable.end(), block->segment));
    memory.free_range(block->segment->base, block->segment->end() - block->segment->base);
    delete block->segment;
    block->pool->unmapped.erase(block);
    delete block;
  }

  PrivatePool& private_pool(PoolId id, bool own_allocator) {
    auto& pool = private_pools[id];
    if (!pool) pool = std::make_unique<PrivatePool>(id, own_allocator);
    return *pool;
  }
};

CachingAllocatorModel::CachingAllocatorModel(DeviceMemory& memory, Options options, TraceListener* listener)
    : impl_(std::make_unique<Impl>(memory, std::move(options), listener)) {}
CachingAllocatorModel::~CachingAllocatorModel() = default;

uint64_t CachingAllocatorModel::malloc(size_t size, uint64_t stream, int64_t context, OutOfMemory* oom) {
  return impl_->malloc(size, stream, context, oom);
}
bool CachingAllocatorModel::free(uint64_t addr, bool wait_for_streams) { return impl_->free(addr, wait_for_streams); }
bool CachingAllocatorModel::complete_free(uint64_t addr) { return impl_->complete_free(addr); }
void CachingAllocatorModel::empty_cache() { impl_->release_cached_blocks(); }
const DeviceStats& CachingAllocatorModel::stats() const { return impl_->stats; }
size_t CachingAllocatorModel::round_size(size_t size) const { return impl_->round_size(size); }

size_t CachingAllocatorModel::allocation_size(size_t rounded) {  // get_allocation_size
  if (rounded <= kSmallSize) return kSmallBuffer;
  if (rounded < kMinLargeAlloc) return kLargeBuffer;
  return kRoundLarge * ((rounded + kRoundLarge - 1) / kRoundLarge);
}

// beginAllocateToPool with use_mem_pool's filter (every stream): the pool's blocks serve the
// allocations until endAllocateToPool.
void CachingAllocatorModel::begin_pool(PoolId id, bool own_allocator) {
  const bool existed = impl_->private_pools.count(id);
  PrivatePool& pool = impl_->private_pool(id, own_allocator);
  if (existed) ++pool.use_count;
  impl_->active_pool = &pool;
}
void CachingAllocatorModel::end_pool() { impl_->active_pool = nullptr; }
void CachingAllocatorModel::release_pool(PoolId id) {
  if (auto it = impl_->private_pools.find(id); it != impl_->private_pools.end() && it->second->use_count > 0)
    --it->second->use_count;
}
void CachingAllocatorModel::set_memory_limit(size_t bytes) {
  impl_->set_fraction = true;
  impl_->allowed_memory_maximum = bytes;
}

void CachingAllocatorModel::reset_peak_stats() {
  DeviceStats& s = impl_->stats;
  s.for_each([](Stat& stat) { stat.peak = stat.current; });
  for (Stat* stat : {&s.oversize_allocations, &s.oversize_segments}) stat->peak = stat->current;
}
void CachingAllocatorModel::reset_accumulated_stats() {
  DeviceStats& s = impl_->stats;
  s.for_each([](Stat& stat) { stat.allocated = stat.freed = 0; });
  for (Stat* stat : {&s.oversize_allocations, &s.oversize_segments}) stat->allocated = stat->freed = 0;
  s.num_alloc_retries = s.num_ooms = s.num_device_alloc = s.num_device_free = 0;
}

std::vector<SegmentView> CachingAllocatorModel::segments() const {
  std::map<uint64_t, SegmentView> by_address;
  for (BlockPool* pool : impl_->all_pools()) {
    for (Block* head : impl_->all_blocks(*pool)) {
      // A segment: a cudaMalloc'd chain, or each run of mapped blocks of an expandable segment.
      if (!head->mapped || (head->prev && (!head->segment || head->prev->mapped))) continue;
      SegmentView s;
      s.addr = head->ptr;
      s.stream = head->stream;
      s.small = pool->is_small;
      s.expandable = head->segment != nullptr;
      s.pool = pool->owner_private_pool ? pool->owner_private_pool->id : PoolId{0, 0};
      s.context = head->segment_context;
      for (Block* b = head; b && b->mapped; b = b->next) {
        s.size += b->size;
        const bool active = b->allocated || b->pending;
        s.blocks.push_back(BlockView{b->ptr, b->size, active ? b->requested_size : 0, b->allocated, b->pending,
                                     active ? b->context : 0});
        if (!b->segment && !b->next) break;
      }
      by_address[s.addr] = std::move(s);
    }
  }
  std::vector<SegmentView> out;
  for (auto& [addr, s] : by_address) out.push_back(std::move(s));
  return out;
}

size_t CachingAllocatorModel::largest_free_block() const {
  size_t most = 0;
  for (BlockPool* pool : impl_->all_pools())
    for (const Block* b : pool->blocks) most = std::max(most, b->size);
  return most;
}

size_t CachingAllocatorModel::expandable_segment_count() const { return impl_->expandable.size(); }
// Unmapped blocks are kept merged, so each run of mapped pages begins at a segment's base or right
// after an unmapped block: counted from the unmapped blocks alone.
size_t CachingAllocatorModel::segment_count() const {
  size_t runs = 0, unmapped_heads = 0;
  for (BlockPool* pool : impl_->all_pools())
    for (const Block* u : pool->unmapped) {
      if (!u->prev) ++unmapped_heads;
      if (u->next && u->next->mapped) ++runs;
    }
  return static_cast<size_t>(impl_->stats.segment.all.current) + runs + (impl_->expandable.size() - unmapped_heads);
}

bool CachingAllocatorModel::adopt_segment(uint64_t addr, size_t size, uint64_t stream, PoolId pool) {
  if (size == 0 || size >= kOneExaByte || addr > UINT64_MAX - size) return false;  // no segment PyTorch made
  BlockPool* into = nullptr;
  const bool small = size == kSmallBuffer;  // no large-pool segment is 2 MiB (get_allocation_size)
  if (pool == PoolId{0, 0})
    into = small ? &impl_->small : &impl_->large;
  else {
    PrivatePool& p = impl_->private_pool(pool, false);
    into = small ? &p.small : &p.large;
  }
  for (Block* b : into->blocks)  // the pool's free blocks: none may overlap it
    if (b->ptr < addr + size && addr < b->ptr + b->size) return false;
  into->insert(impl_->new_segment(*into, addr, size, stream, 0, false));
  return true;
}

bool CachingAllocatorModel::adopt_block(uint64_t addr, size_t requested, uint64_t stream, int64_t context) {
  if (requested >= kOneExaByte) return false;
  const size_t size = impl_->round_size(requested);
  for (BlockPool* pool : impl_->all_pools()) {
    for (Block* b : pool->blocks) {
      if (b->ptr > addr || addr - b->ptr >= b->size) continue;
      if (b->stream != stream || b->size - (addr - b->ptr) < size) return false;
      pool->blocks.erase(b);
      if (addr > b->ptr) {  // the free part before it
        auto* before = new Block(*b);
        before->size = addr - b->ptr;
        before->next = b;
        if (b->prev) b->prev->next = before;
        b->prev = before;
        b->ptr = addr;
        b->size -= before->size;
        pool->insert(before);
      }
      impl_->hand_out(b, *pool, size, requested, stream, context);
      return true;
    }
  }
  return false;
}

}  // namespace memtrace::torch_model
