// The largest allocations of a trace with their lifetimes, in bounded memory: what the HTML
// report draws one by one (everything smaller is drawn as the rest of its layer). Of both layers;
// at most a fixed number kept, the largest first, whatever the trace's length.
#pragma once

#include <cstdint>
#include <queue>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "memtrace/engine/replay.h"

namespace memtrace {

struct AllocationSpan {
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;  // 0: live at the end
  uint64_t bytes = 0;
  uint64_t addr = 0;
  int32_t device = -1;
  Layer layer = Layer::kReserved;
  Api api = Api::kUnknown;
  uint64_t stack_id = 0;
  uint32_t tid = 0;
};

class LargestAllocations {
 public:
  explicit LargestAllocations(size_t keep) : keep_(keep) {}

  // Feeds what one event did to memory.
  void add(const Event& e, const ReplayStep& step);
  // The allocations kept, in the order they were made.
  std::vector<AllocationSpan> spans() const;
  // How many allocations there were, kept or not.
  uint64_t seen() const { return seen_; }

 private:
  using Key = std::tuple<bool, int32_t, uint64_t>;  // (allocated layer, device, address)
  struct KeyHash {
    size_t operator()(const Key& k) const {
      return std::hash<uint64_t>()(std::get<2>(k) * 31 + static_cast<uint64_t>(std::get<1>(k)) * 2 + std::get<0>(k));
    }
  };

  size_t keep_;
  uint64_t seen_ = 0, next_id_ = 0;
  std::unordered_map<uint64_t, AllocationSpan> kept_;  // by id
  std::priority_queue<std::pair<uint64_t, uint64_t>, std::vector<std::pair<uint64_t, uint64_t>>,
                      std::greater<>>
      smallest_;                                     // (bytes, id): the one to drop next
  std::unordered_map<Key, uint64_t, KeyHash> live_;  // kept and live: id
};

}  // namespace memtrace
