#include "memtrace/engine/largest_allocations.h"

#include <algorithm>

namespace memtrace {

void LargestAllocations::add(const Event& e, const ReplayStep& step) {
  for (const MemoryChange& c : step.memory_changes) {
    const Key key{c.layer == Layer::kAllocated, c.device, c.addr};
    if (!c.arrived) {
      auto it = live_.find(key);
      if (it == live_.end()) continue;
      kept_[it->second].end_ns = std::max<uint64_t>(e.t_ns, 1);  // 0 means live
      live_.erase(it);
      continue;
    }
    ++seen_;
    if (auto again = live_.find(key); again != live_.end()) {  // made again without a free we saw
      kept_[again->second].end_ns = std::max<uint64_t>(e.t_ns, 1);
      live_.erase(again);
    }
    const auto bytes = static_cast<uint64_t>(c.bytes);
    if (keep_ == 0 || (kept_.size() >= keep_ && bytes <= smallest_.top().first)) continue;
    if (kept_.size() >= keep_) {  // the smallest kept one makes room
      const uint64_t dropped = smallest_.top().second;
      smallest_.pop();
      const AllocationSpan& d = kept_[dropped];
      if (d.end_ns == 0) live_.erase(Key{d.layer == Layer::kAllocated, d.device, d.addr});
      kept_.erase(dropped);
    }
    const uint64_t id = next_id_++;
    kept_[id] = AllocationSpan{e.t_ns, 0, bytes, c.addr, c.device, c.layer, c.site.api, c.site.stack_id, e.tid};
    smallest_.emplace(bytes, id);
    live_[key] = id;
  }
}

std::vector<AllocationSpan> LargestAllocations::spans() const {
  std::vector<std::pair<uint64_t, const AllocationSpan*>> by_id;
  for (const auto& [id, span] : kept_) by_id.emplace_back(id, &span);
  std::sort(by_id.begin(), by_id.end());
  std::vector<AllocationSpan> out;
  for (const auto& [id, span] : by_id) out.push_back(*span);
  return out;
}

}  // namespace memtrace
