#include "memtrace/engine/growth.h"

#include <algorithm>

namespace memtrace {

void GrowthTracker::observe(Series& s, uint64_t bytes) {
  // Before the first step boundary there is an implicit one at the trace's start, with nothing
  // live: a site first seen now held 0 bytes at every earlier boundary.
  if (bytes > s.last) {
    if (s.rises++ == 0) {
      s.first_rise_step = boundaries_ - 1;  // boundary k ends step k-1
      s.before_rise = s.last;
    }
  } else if (bytes < s.last) {
    ++s.falls;
  }
  s.last = bytes;
  s.seen = boundaries_;
  if (boundaries_ == 1) s.at_first_boundary = bytes;
}

std::string growth_unmeasured(uint64_t steps, const std::string& pattern) {
  if (steps >= kStepsToMeasureGrowth) return {};
  return "needs " + std::to_string(kStepsToMeasureGrowth) + " steps or more (found " + std::to_string(steps) +
         " matching /" + pattern + "/; name them with --step REGEX)";
}

std::vector<SiteGrowth> GrowthTracker::growing() const {
  std::vector<SiteGrowth> out;
  if (boundaries_ < kStepsToMeasureGrowth) return out;
  const uint64_t intervals = boundaries_;  // from the trace's start
  for (const auto& [key, s] : series_) {
    if (s.last == 0 || s.rises < std::max<uint64_t>(2, (intervals + 1) / 2) || s.falls * 10 > intervals) continue;
    SiteGrowth g;
    g.device = std::get<0>(key);
    g.layer = std::get<1>(key);
    g.site = Site{std::get<2>(key), s.stack_id};
    g.group = std::get<3>(key);
    // The rate since it began to grow: a leak that starts in step 3 leaks per step from there. One
    // that grew from the trace's start is measured from the first boundary: before it, the
    // program also set up (weights allocated once through the same helper are no growth).
    g.bytes_per_step = s.first_rise_step == 0 && intervals > 1
                           ? (s.last - std::min(s.last, s.at_first_boundary)) / (intervals - 1)
                           : (s.last - std::min(s.last, s.before_rise)) / (intervals - s.first_rise_step);
    g.first_step = s.first_rise_step;
    g.steps_rising = s.rises;
    g.intervals = intervals;
    g.bytes_at_last_boundary = s.last;
    out.push_back(g);
  }
  std::sort(out.begin(), out.end(), [](const SiteGrowth& a, const SiteGrowth& b) {
    return a.bytes_per_step != b.bytes_per_step ? a.bytes_per_step > b.bytes_per_step
                                                : a.site.stack_id < b.site.stack_id;
  });
  return out;
}

}  // namespace memtrace
