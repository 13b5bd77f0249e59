#include "memtrace/engine/phases.h"

#include <algorithm>

namespace memtrace {

PhaseTracker::PhaseTracker(const TraceReader& reader, const std::string& step_pattern)
    : reader_(reader), step_pattern_(step_pattern, std::regex::ECMAScript | std::regex::optimize) {}

bool PhaseTracker::is_step(uint64_t name_id) {
  auto [it, fresh] = is_step_.try_emplace(name_id, false);
  if (fresh) {
    std::string name(reader_.string(name_id));
    it->second = std::regex_match(name, step_pattern_);
  }
  return it->second;
}

void PhaseTracker::add_mark(const Event& e) {
  switch (e.api) {
    case Api::kNvtxMark:
    case Api::kShimMark:
      if (is_step(e.name)) step_starts_.push_back(e.t_ns);
      break;
    case Api::kNvtxRangePush:
    case Api::kShimRangePush: {
      if (is_step(e.name)) step_starts_.push_back(e.t_ns);
      auto& stack = pushed_[e.tid];
      stack.push_back(
          PhaseRange{e.t_ns, 0, e.tid, static_cast<uint32_t>(stack.size()), std::string(reader_.string(e.name))});
      break;
    }
    case Api::kNvtxRangePop:
    case Api::kShimRangePop: {
      auto it = pushed_.find(e.tid);
      if (it == pushed_.end() || it->second.empty()) break;
      close(std::move(it->second.back()), e.t_ns);
      it->second.pop_back();
      break;
    }
    case Api::kNvtxRangeStart:
      if (is_step(e.name)) step_starts_.push_back(e.t_ns);
      started_[e.addr] = PhaseRange{e.t_ns, 0, e.tid, 0, std::string(reader_.string(e.name))};
      break;
    case Api::kNvtxRangeEnd: {
      auto it = started_.find(e.addr);
      if (it == started_.end()) break;
      close(std::move(it->second), e.t_ns);
      started_.erase(it);
      break;
    }
    default: break;
  }
}

void PhaseTracker::close(PhaseRange range, uint64_t end_ns) {
  range.end_ns = end_ns;
  if (ranges_.size() < kMaxRanges)
    ranges_.push_back(std::move(range));
  else
    ++ranges_dropped_;
}

void PhaseTracker::finish(uint64_t end_ns) {
  for (auto& [tid, stack] : pushed_)
    while (!stack.empty()) {
      close(std::move(stack.back()), end_ns);
      stack.pop_back();
    }
  for (auto& [id, range] : started_) close(std::move(range), end_ns);
  started_.clear();
  std::sort(ranges_.begin(), ranges_.end(), [](const PhaseRange& a, const PhaseRange& b) {
    return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.depth < b.depth;
  });
}

uint64_t PhaseTracker::step_at(uint64_t t_ns) const {
  return static_cast<uint64_t>(std::upper_bound(step_starts_.begin(), step_starts_.end(), t_ns) - step_starts_.begin());
}

std::string PhaseTracker::phase_at(uint64_t t_ns, uint32_t tid) const {
  const PhaseRange* best = nullptr;
  for (bool same_thread : {true, false}) {
    for (const PhaseRange& r : ranges_) {
      if (r.start_ns > t_ns) break;  // sorted by start
      if (r.end_ns < t_ns || (same_thread && r.tid != tid)) continue;
      if (!best || r.start_ns >= best->start_ns) best = &r;  // the innermost: the latest to start
    }
    if (best) return best->name;
  }
  return {};
}

}  // namespace memtrace
