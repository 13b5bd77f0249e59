// What a PyTorch snapshot's importer holds of it: entries of a device's trace, blocks handed to
// tensors, reserved ranges, and what was live before the trace began, found going forwards (the
// entries stream past once: they are not kept to walk backwards, as PyTorch's viewer does).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <unordered_set>
#include <utility>
#include <vector>

#include "memtrace/format/torch_action.h"

namespace memtrace::snapshot {

// Stacks and categories are kept as the writer interned them (0: none): an entry outlives the
// pickle values it was read from.
struct Entry {
  std::optional<TorchAction> action;  // none: an action this table does not know (later versions')
  int32_t device = 0;
  uint64_t addr = 0, size = 0, stream = 0, device_free = 0;
  int64_t time_us = -1;
  uint64_t stack = 0;
  uint64_t category = 0;
};

// A block handed to a tensor, live (or waiting for its streams: pending) at some moment.
struct Block {
  uint64_t size = 0;
  uint64_t stack = 0;
  bool pending = false;
  uint64_t category = 0;
};

// Reserved memory: a segment, or a mapped range of an expandable one.
struct Range {
  uint64_t size = 0;
  bool expandable = false;
  uint64_t stack = 0;
  uint64_t stream = 0;
  uint64_t pool = 0;  // the private pool it was made for (torch_pool_key of segment_pool_id)
};
using Ranges = std::map<uint64_t, Range>;

// Takes [addr, addr+size) out of RANGES. GONE(base, range) is told of each range it cut, KEPT(base,
// range) of each part of one that stays.
template <typename Gone, typename Kept>
void carve(Ranges& ranges, uint64_t addr, uint64_t size, Gone&& gone, Kept&& kept) {
  uint64_t end = addr + std::min(size, UINT64_MAX - addr);
  auto it = ranges.upper_bound(addr);
  if (it != ranges.begin()) --it;
  while (it != ranges.end() && it->first < end) {
    uint64_t base = it->first, range_end = base + it->second.size;
    if (range_end <= addr) {
      ++it;
      continue;
    }
    Range r = it->second;
    it = ranges.erase(it);
    gone(base, r);
    if (base < addr) {
      Range left = r;
      left.size = addr - base;
      ranges[base] = left;
      kept(base, left);
    }
    if (range_end > end) {
      Range right = r;
      right.size = range_end - end;
      it = ranges.emplace(end, right).first;
      kept(end, right);
      ++it;
    }
  }
}

// What was live before a device's trace began, from its entries in order and the state at its
// end, as PyTorch's viewer finds it walking the entries backwards: a block freed in the trace that
// the trace did not allocate was live before it (as the free describes it); each byte of reserved
// memory was as the first entry that touched it says (reserved there: not before; released
// there: before); what no entry touched was as the end shows it. Memory grows with the blocks
// live at a time and the reserved ranges, not with the entries.
class StartState {
 public:
  void see(const Entry& e);
  // Whether seeing E may keep its stack (false: E's stack need not be read for it).
  bool may_keep(const Entry& e) const;
  // The blocks and reserved ranges live before the first entry, given those at the end.
  std::map<uint64_t, Block> blocks(const std::map<uint64_t, Block>& at_end) const;
  Ranges reserved(const Ranges& at_end) const;

 private:
  // Calls F(begin, end) for each part of [BEGIN, END) no entry touched yet.
  template <typename F>
  void untouched(uint64_t begin, uint64_t end, F&& f) const;
  void touch(uint64_t begin, uint64_t end);

  std::unordered_set<uint64_t> allocated_;  // blocks the trace allocated and has not freed
  std::map<uint64_t, Block> before_;        // blocks it freed without allocating them
  std::unordered_set<uint64_t> requested_;  // blocks whose free it requested before any of that
  std::map<uint64_t, uint64_t> touched_;    // reserved bytes some entry touched: begin -> end, merged
  Ranges freed_first_;                      // parts released before anything else touched them
};

}  // namespace memtrace::snapshot
