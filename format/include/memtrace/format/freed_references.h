// Frees named by what they free (format version 2, the `freed` column of EventBatch): a free
// stores which earlier allocation it ends instead of that allocation's address, which costs most
// of a trace's bytes when frees come in no order. The writer marks each successful allocation
// (1, counted over the whole trace); a successful free of a marked allocation (same address,
// layer and kind) stores 2 + (B << 1) where the allocation lies B marks before the newest, or
// 2 + (S << 1 | 1) where it lies S (zig-zag) marks after the one the last reference freed,
// whichever is smaller, and 0 for its address (the address column's deltas then skip it). The
// reader gives the free that address back, so every event reads exactly as written; it holds one
// entry for each marked allocation not freed by reference yet.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memtrace/base/address_map.h"
#include "memtrace/format/event.h"

namespace memtrace {

// The writer's side: the column's value of each event, in the order written.
class FreedReferenceWriter {
 public:
  uint64_t value(const Event& event);

 private:
  struct Marked {
    uint64_t ordinal, addr;
  };
  AddressMap<Marked> live_;  // by address, layer and kind
  uint64_t marked_ = 0;
  uint64_t last_freed_ = 0;  // the ordinal of the allocation the last reference freed
};

// The reader's side: the references of each batch resolved, batch after batch.
class FreedReferenceReader {
 public:
  // Gives the events of EVENTS whose FREED value is 2 or more the address of the allocation they
  // free; FREED holds one value per event. Returns what is wrong (a reference to
  // no marked allocation, or to one freed already), or nothing.
  std::string resolve(std::vector<Event>& events, const std::vector<uint64_t>& freed);

 private:
  struct Marked {
    uint64_t addr;
    bool live;
  };
  // The newest marked allocations, ordinal O in slot O % kWindow, and older ones still live by
  // ordinal: most frees end a recent allocation, and the window keeps them out of the hash map.
  std::vector<Marked> window_;
  uint64_t marked_ = 0;
  AddressMap<Marked> older_;
  uint64_t last_freed_ = 0;  // the ordinal of the allocation the last reference freed
  static constexpr size_t kWindow = 8192;
};

}  // namespace memtrace
