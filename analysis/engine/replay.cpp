#include "memtrace/engine/replay.h"

#include <iterator>

namespace memtrace {

const ReplayStep& Replay::apply(const Event& e) {
  step_.event = &e;
  step_.kind = e.kind;
  step_.device = e.device;
  step_.size = e.size;
  step_.matched = true;
  step_.memory_changes.clear();
  step_.pinned_host_bytes = 0;
  if (!e.ok() || e.op() == Op::kMark) return step_;  // a failed call changes nothing, nor does a mark
  if (e.layer == Layer::kAllocated) {
    if (e.api == Api::kTorchSegmentMap)
      map_heap(e);
    else if (e.api == Api::kTorchSegmentUnmap)
      unmap_heap(e);
    else if (e.kind == MemKind::kHeap && e.op() == Op::kAlloc)
      heaps_[e.addr] = Heap{e.size, step_.device = event_device(e, e.addr)};
    else if (e.kind == MemKind::kHeap)
      drop_heap(e);
    else if (e.op() == Op::kAlloc)
      allocate_region(e);
    else if (auto it = regions_.find(e.addr); it != regions_.end()) {
      step_.size = 0;  // what it freed, as free_region counts it
      free_region(it);
    } else
      unmatched();
    return step_;
  }
  if (e.op() == Op::kAlloc)
    allocate(e);
  else
    free(e);
  return step_;
}

int32_t Replay::heap_device(uint64_t base) const {
  // A heap is usually one of the allocator's segments; failing that, a process with one device.
  if (const uint32_t* a = addresses_.find(base)) return pool_[*a].device;
  return device_bytes_.map().size() == 1 ? device_bytes_.map().begin()->first : -1;
}

void Replay::count_allocated(const LiveAllocation& a, uint64_t addr, int64_t sign) {
  int64_t bytes = sign * static_cast<int64_t>(a.size);
  allocated_bytes_[a.device] += static_cast<uint64_t>(bytes);
  allocated_total_ += static_cast<uint64_t>(bytes);
  step_.memory_changes.push_back(
      MemoryChange{a.device, bytes, Site{a.api, a.stack_id}, Layer::kAllocated, addr, a.heap, sign > 0});
}

void Replay::allocate_region(const Event& e) {
  auto heap = heaps_.find(e.heap);
  int32_t device = heap != heaps_.end() ? heap->second.device : event_device(e, e.addr);
  LiveAllocation a{e.api, e.kind, device, e.size, e.stack_id, e.t_ns, e.tid, e.heap};
  step_.device = device;
  auto [it, fresh] = regions_.try_emplace(e.addr, a);
  if (!fresh) {  // registered again without an unregister we saw
    count_allocated(it->second, it->first, -1);
    it->second = a;
  }
  count_allocated(a, e.addr, +1);
}

void Replay::free_region(std::map<uint64_t, LiveAllocation>::iterator it) {
  step_.device = it->second.device;
  step_.size += it->second.size;
  count_allocated(it->second, it->first, -1);
  regions_.erase(it);
}

void Replay::drop_heap(const Event& e) {
  auto heap = heaps_.find(e.addr);
  if (heap == heaps_.end()) return unmatched();
  step_.size = 0;
  for (auto it = regions_.lower_bound(e.addr); it != regions_.end() && it->first < e.addr + heap->second.size;)
    free_region(it++);
  step_.device = heap->second.device;
  if (e.api != Api::kNvtxMemHeapReset) heaps_.erase(heap);
}

void Replay::map_heap(const Event& e) {
  int32_t device = step_.device = event_device(e, e.addr);
  auto next = heaps_.lower_bound(e.addr);
  uint64_t size = e.size;
  if (next != heaps_.end() && next->first == e.addr + e.size && next->second.device == device) {
    size += next->second.size;  // the heap after it joins
    next = heaps_.erase(next);
  }
  if (next != heaps_.begin()) {
    auto before = std::prev(next);
    if (before->first + before->second.size == e.addr && before->second.device == device) {
      before->second.size += size;
      return;
    }
  }
  heaps_[e.addr] = Heap{size, device};
}

void Replay::unmap_heap(const Event& e) {
  auto it = heaps_.upper_bound(e.addr);
  if (it == heaps_.begin()) return unmatched();
  --it;
  uint64_t base = it->first, end = base + it->second.size, cut_end = e.addr + e.size;
  if (cut_end > end) return unmatched();
  step_.device = it->second.device;
  step_.size = e.size;
  // Blocks in unmapped memory cannot be live; any that the trace left there go with it.
  for (auto r = regions_.lower_bound(e.addr); r != regions_.end() && r->first < cut_end;) free_region(r++);
  Heap heap = it->second;
  heaps_.erase(it);
  if (e.addr > base) heaps_[base] = Heap{e.addr - base, heap.device};
  if (cut_end < end) heaps_[cut_end] = Heap{end - cut_end, heap.device};
}

void Replay::unmatched() {
  step_.matched = false;
  ++unmatched_frees_;
}

void Replay::count(const LiveAllocation& a, uint64_t addr, int64_t sign) {
  int64_t bytes = sign * static_cast<int64_t>(a.size);
  if (counts_as_device_memory(a.kind)) {
    device_bytes_[a.device] += static_cast<uint64_t>(bytes);
    reserved_bytes_ += static_cast<uint64_t>(bytes);
    step_.memory_changes.push_back(
        MemoryChange{a.device, bytes, Site{a.api, a.stack_id}, Layer::kReserved, addr, 0, sign > 0});
  } else if (a.kind == MemKind::kPinnedHost) {
    pinned_host_bytes_ += static_cast<uint64_t>(bytes);
    step_.pinned_host_bytes += bytes;
  }
}

void Replay::allocate(const Event& e) {
  LiveAllocation a{e.api, e.kind, e.device, e.size, e.stack_id, e.t_ns, e.tid};
  switch (e.kind) {
    case MemKind::kVmmPhysical:
    case MemKind::kVmmImported:
    case MemKind::kMulticast: {  // handles, released alike by cuMemRelease
      auto [it, fresh] = handles_.try_emplace(e.addr);
      if (!fresh) count(it->second.allocation, e.addr, -1);  // a handle we never saw released
      it->second = Handle{a};
      count(a, e.addr, +1);
      break;
    }
    case MemKind::kVmmMapping: {
      mappings_[e.addr] = Mapping{e.size, e.handle};
      auto h = handles_.find(e.handle);
      if (h != handles_.end()) {
        ++h->second.mappings;
        step_.device = h->second.allocation.device;
        // An imported handle's size is known only from how much of it is mapped.
        LiveAllocation& a = h->second.allocation;
        if (a.kind == MemKind::kVmmImported && a.size < e.size) a.size = e.size;
      }
      break;
    }
    case MemKind::kVaReservation: reservations_[e.addr] = a; break;
    default: {
      auto [index, fresh] = addresses_.try_emplace(e.addr, 0);
      if (fresh) {
        if (free_entries_.empty()) {
          free_entries_.push_back(static_cast<uint32_t>(pool_.size()));
          pool_.emplace_back();
        }
        *index = free_entries_.back();
        free_entries_.pop_back();
      } else {  // the same address again without a free we saw: the old one is gone
        count(pool_[*index], e.addr, -1);
      }
      pool_[*index] = a;
      count(a, e.addr, +1);
    }
  }
}

void Replay::retire_handle_if_unused(std::unordered_map<uint64_t, Handle>::iterator it) {
  // Physical memory stays until the handle is released and no mapping uses it, as on a GPU.
  if (it->second.released && it->second.mappings == 0) {
    count(it->second.allocation, it->first, -1);
    handles_.erase(it);
  }
}

void Replay::free(const Event& e) {
  auto describe = [this](const LiveAllocation& a) {
    step_.kind = a.kind;
    step_.device = a.device;
    step_.size = a.size;
  };
  switch (e.kind) {
    case MemKind::kVmmPhysical: {  // cuMemRelease: whatever kind of handle it is
      auto it = handles_.find(e.addr);
      if (it == handles_.end() || it->second.released) break;
      describe(it->second.allocation);
      it->second.released = true;
      retire_handle_if_unused(it);
      return;
    }
    case MemKind::kVmmMapping: {
      // One unmap may cover several mappings.
      auto it = mappings_.lower_bound(e.addr);
      if (it == mappings_.end() || it->first != e.addr) break;
      uint64_t end = e.addr + (e.size ? e.size : it->second.size), unmapped = 0;
      while (it != mappings_.end() && it->first < end) {
        unmapped += it->second.size;
        auto h = handles_.find(it->second.handle);
        if (h != handles_.end()) {
          step_.device = h->second.allocation.device;
          if (h->second.mappings > 0) --h->second.mappings;
          retire_handle_if_unused(h);
        }
        it = mappings_.erase(it);
      }
      step_.size = unmapped;
      return;
    }
    case MemKind::kVaReservation: {
      auto it = reservations_.find(e.addr);
      if (it == reservations_.end()) break;
      describe(it->second);
      reservations_.erase(it);
      return;
    }
    default: {
      if (e.addr == 0) return;  // cudaFree(nullptr): nothing to free, nothing missing
      const uint32_t* index = addresses_.find(e.addr);
      if (!index) break;
      describe(pool_[*index]);
      count(pool_[*index], e.addr, -1);
      free_entries_.push_back(*index);  // reused first: its cache line is still warm
      addresses_.erase(e.addr);
      return;
    }
  }
  unmatched();
}

}  // namespace memtrace
