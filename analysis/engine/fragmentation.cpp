#include "memtrace/engine/fragmentation.h"

#include <algorithm>
#include <iterator>

namespace memtrace {

void FragmentationTracker::add_gap(DeviceGaps& d, uint64_t bytes) {
  if (bytes) d.gaps.insert(bytes);
}

void FragmentationTracker::remove_gap(DeviceGaps& d, uint64_t bytes) {
  if (!bytes) return;
  auto it = d.gaps.find(bytes);
  if (it != d.gaps.end()) d.gaps.erase(it);
}

std::map<uint64_t, FragmentationTracker::HeapState>::iterator FragmentationTracker::heap_of(uint64_t heap_base,
                                                                                            uint64_t addr) {
  auto it = heaps_.find(heap_base);
  if (it != heaps_.end()) return it;
  it = heaps_.upper_bound(addr);  // a region that did not say its heap: the heap it lies in
  if (it == heaps_.begin()) return heaps_.end();
  --it;
  return addr < it->first + it->second.size ? it : heaps_.end();
}

std::pair<uint64_t, uint64_t> FragmentationTracker::gap_around(uint64_t base, const HeapState& heap,
                                                               uint64_t addr) const {
  // ADDR is not one of the heap's regions (added after, removed before this is asked).
  uint64_t from = base, to = base + heap.size;
  auto next = heap.regions.upper_bound(addr);
  if (next != heap.regions.end()) to = std::min(to, next->first);
  if (next != heap.regions.begin())
    from = std::max(from, std::min(std::prev(next)->first + std::prev(next)->second, to));
  return {from, to};
}

void FragmentationTracker::region_added(uint64_t base, HeapState& heap, uint64_t addr, uint64_t size) {
  DeviceGaps& d = devices_[heap.device];
  if (heap.regions.count(addr)) region_removed(base, heap, addr);  // described again
  auto [from, to] = gap_around(base, heap, addr);
  uint64_t start = std::clamp(addr, from, to), end = std::clamp(addr + size, start, to);
  remove_gap(d, to - from);
  add_gap(d, start - from);
  add_gap(d, to - end);
  d.free_bytes -= std::min(d.free_bytes, end - start);
  heap.regions[addr] = size;
}

void FragmentationTracker::region_removed(uint64_t base, HeapState& heap, uint64_t addr) {
  auto it = heap.regions.find(addr);
  if (it == heap.regions.end()) return;
  DeviceGaps& d = devices_[heap.device];
  uint64_t size = it->second;
  heap.regions.erase(it);
  auto [from, to] = gap_around(base, heap, addr);
  uint64_t start = std::clamp(addr, from, to), end = std::clamp(addr + size, start, to);
  remove_gap(d, start - from);
  remove_gap(d, to - end);
  add_gap(d, to - from);
  d.free_bytes += end - start;
}

void FragmentationTracker::add(const Event& e, const ReplayStep& step, const Replay& replay) {
  if (e.layer != Layer::kAllocated || !e.ok()) return;
  for (const MemoryChange& c : step.memory_changes) {
    if (c.layer != Layer::kAllocated) continue;
    auto heap = heap_of(c.heap, c.addr);
    if (heap == heaps_.end()) continue;
    if (c.arrived)
      region_added(heap->first, heap->second, c.addr, static_cast<uint64_t>(c.bytes));
    else
      region_removed(heap->first, heap->second, c.addr);
  }
  if (e.kind != MemKind::kHeap) return;
  if (e.api == Api::kTorchSegmentMap) return map_range(e, replay);
  if (e.api == Api::kTorchSegmentUnmap) return unmap_range(e);
  if (e.op() == Op::kAlloc) {
    seen_heaps_ = true;
    auto known = replay.heaps().find(e.addr);
    HeapState h;
    h.size = e.size;
    h.device = known != replay.heaps().end() ? known->second.device : -1;
    if (auto old = heaps_.find(e.addr); old != heaps_.end()) {  // registered again: the old one is gone
      DeviceGaps& d = devices_[old->second.device];
      d.heap_bytes -= old->second.size;
      d.free_bytes -= std::min(d.free_bytes, old->second.size);
      remove_gap(d, old->second.size);
      heaps_.erase(old);
    }
    DeviceGaps& d = devices_[h.device];
    d.heap_bytes += h.size;
    d.free_bytes += h.size;
    add_gap(d, h.size);
    heaps_[e.addr] = std::move(h);
  } else if (e.api != Api::kNvtxMemHeapReset) {
    auto it = heaps_.find(e.addr);
    if (it == heaps_.end()) return;
    // Its regions went with the replay's changes above: what is left is one gap, the whole heap.
    DeviceGaps& d = devices_[it->second.device];
    remove_gap(d, it->second.size);
    d.heap_bytes -= it->second.size;
    d.free_bytes -= std::min(d.free_bytes, it->second.size);
    heaps_.erase(it);
  }
}

uint64_t FragmentationTracker::tail_gap(uint64_t base, const HeapState& heap) {
  uint64_t last_end = heap.regions.empty() ? base : heap.regions.rbegin()->first + heap.regions.rbegin()->second;
  return base + heap.size - std::min(base + heap.size, last_end);
}

uint64_t FragmentationTracker::head_gap(uint64_t base, const HeapState& heap) {
  return heap.regions.empty() ? heap.size : std::min(heap.size, heap.regions.begin()->first - base);
}

void FragmentationTracker::map_range(const Event& e, const Replay& replay) {
  // Merged as the replay merges it: with the heap that ends where it starts and the one that
  // starts where it ends, on the same device. Its free space joins theirs: the tail of the one
  // before, the head of the one after.
  seen_heaps_ = true;
  auto known = replay.heaps().upper_bound(e.addr);
  int32_t device = known == replay.heaps().begin() ? -1 : std::prev(known)->second.device;
  DeviceGaps& d = devices_[device];
  uint64_t gap = e.size, base = e.addr;
  HeapState merged;
  merged.device = device;
  merged.size = e.size;
  auto after = heaps_.find(e.addr + e.size);
  if (after != heaps_.end() && after->second.device == device) {
    uint64_t head = head_gap(after->first, after->second);
    remove_gap(d, head);
    gap += head;
    merged.size += after->second.size;
    merged.regions = std::move(after->second.regions);
    heaps_.erase(after);
  }
  auto before = heaps_.lower_bound(e.addr);
  if (before != heaps_.begin() && std::prev(before)->second.device == device &&
      std::prev(before)->first + std::prev(before)->second.size == e.addr) {
    --before;
    uint64_t tail = tail_gap(before->first, before->second);
    remove_gap(d, tail);
    gap += tail;
    base = before->first;
    merged.size += before->second.size;
    merged.regions.merge(before->second.regions);
    heaps_.erase(before);
  }
  heaps_[base] = std::move(merged);
  add_gap(d, gap);
  d.heap_bytes += e.size;
  d.free_bytes += e.size;
}

void FragmentationTracker::unmap_range(const Event& e) {
  auto it = heaps_.upper_bound(e.addr);
  if (it == heaps_.begin()) return;
  --it;
  uint64_t base = it->first, cut_end = e.addr + e.size;
  if (cut_end > base + it->second.size) return;
  HeapState heap = std::move(it->second);
  heaps_.erase(it);
  DeviceGaps& d = devices_[heap.device];
  // The range lies in one gap (no block is live in unmapped memory): that gap loses it.
  auto [from, to] = gap_around(base, heap, e.addr);
  remove_gap(d, to - from);
  add_gap(d, std::min(e.addr, to) - std::min(from, e.addr));
  add_gap(d, to - std::min(to, std::max(from, cut_end)));
  d.heap_bytes -= std::min(d.heap_bytes, e.size);
  d.free_bytes -= std::min(d.free_bytes, e.size);
  HeapState low, high;
  low.device = high.device = heap.device;
  low.size = e.addr - base;
  high.size = base + heap.size - cut_end;
  for (auto& [addr, size] : heap.regions) (addr < e.addr ? low : high).regions[addr] = size;
  if (low.size) heaps_[base] = std::move(low);
  if (high.size) heaps_[cut_end] = std::move(high);
}

FreeSpace FragmentationTracker::free_space(int32_t device) const {
  FreeSpace f;
  auto it = devices_.find(device);
  if (it == devices_.end()) return f;
  f.heap_bytes = it->second.heap_bytes;
  f.free_bytes = it->second.free_bytes;
  f.largest_free = it->second.gaps.empty() ? 0 : *it->second.gaps.rbegin();
  return f;
}

}  // namespace memtrace
