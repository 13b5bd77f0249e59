// Fragmentation where the layers are known: an allocator's heaps (its reserved segments) and the
// regions it handed out of them (the allocated layer). The free space of a device is every gap
// between regions inside its heaps; the fragmentation index is 1 - largest gap / total free.
#pragma once

#include <cstdint>
#include <map>
#include <set>

#include "memtrace/engine/replay.h"

namespace memtrace {

struct FreeSpace {
  uint64_t heap_bytes = 0;    // what the heaps span
  uint64_t free_bytes = 0;    // of it, not handed out
  uint64_t largest_free = 0;  // the largest single gap
  double index() const {
    return free_bytes ? 1.0 - static_cast<double>(largest_free) / static_cast<double>(free_bytes) : 0.0;
  }
};

class FragmentationTracker {
 public:
  // Feeds one event and what the replay made of it.
  void add(const Event& e, const ReplayStep& step, const Replay& replay);
  bool any_heaps() const { return seen_heaps_; }
  FreeSpace free_space(int32_t device) const;

 private:
  struct HeapState {
    uint64_t size = 0;
    int32_t device = -1;
    std::map<uint64_t, uint64_t> regions;  // address -> size
  };
  struct DeviceGaps {
    std::multiset<uint64_t> gaps;
    uint64_t heap_bytes = 0, free_bytes = 0;
  };
  // The gap around [addr, addr+size) in HEAP: from the end of the region before to the start of
  // the region after.
  std::pair<uint64_t, uint64_t> gap_around(uint64_t base, const HeapState& heap, uint64_t addr) const;
  void region_added(uint64_t base, HeapState& heap, uint64_t addr, uint64_t size);
  void region_removed(uint64_t base, HeapState& heap, uint64_t addr);
  void add_gap(DeviceGaps& d, uint64_t bytes);
  void remove_gap(DeviceGaps& d, uint64_t bytes);
  std::map<uint64_t, HeapState>::iterator heap_of(uint64_t heap_base, uint64_t addr);
  // Expandable segments (PyTorch's segment_map and segment_unmap): a heap grows, shrinks, splits.
  void map_range(const Event& e, const Replay& replay);
  void unmap_range(const Event& e);
  // The free space before a heap's first region, and after its last.
  static uint64_t head_gap(uint64_t base, const HeapState& heap);
  static uint64_t tail_gap(uint64_t base, const HeapState& heap);

  std::map<uint64_t, HeapState> heaps_;  // by base address
  std::map<int32_t, DeviceGaps> devices_;
  bool seen_heaps_ = false;
};

}  // namespace memtrace
