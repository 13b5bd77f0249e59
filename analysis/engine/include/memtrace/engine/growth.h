// Leaks that grow step by step: at every step boundary, the live bytes of each allocation site;
// a site whose bytes rise from step to step (and hardly ever fall) is growing, the classic
// `total_loss += loss`. Memory allocated once and kept (weights, optimizer state) rises once,
// then stays flat: it is not growth.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "memtrace/engine/replay.h"
#include "memtrace/engine/stacks.h"

namespace memtrace {

struct SiteGrowth {
  int32_t device = -1;
  Layer layer = Layer::kReserved;
  Site site;           // the grouping key's api and one stack of the site
  uint64_t group = 0;  // what its allocations were grouped by, as SiteTotal::group
  uint64_t bytes_per_step = 0;
  uint64_t first_step = 0;  // the step in which it first grew
  uint64_t steps_rising = 0;
  uint64_t intervals = 0;  // steps observed: boundaries, counting from the trace's start
  uint64_t bytes_at_last_boundary = 0;
  // Filled in against the trace's tables, as for SiteTotal.
  std::string location;
  std::vector<FrameView> stack;
  size_t named_frame = 0;  // the frame of STACK that LOCATION names
};

// Growth is told from memory kept only over this many steps or more.
constexpr uint64_t kStepsToMeasureGrowth = 3;
// Why growth per step cannot be measured over STEPS steps named by /PATTERN/; empty when it can.
std::string growth_unmeasured(uint64_t steps, const std::string& pattern);

class GrowthTracker {
 public:
  // A step boundary: the live bytes of every site now (sites not named hold nothing).
  // FN(visit) must call visit(device, layer, key, bytes, stack_id) for each live site.
  template <typename ForEachSite>
  void boundary(ForEachSite&& for_each_site) {
    ++boundaries_;
    for_each_site([this](int32_t device, Layer layer, const Site& key, uint64_t bytes, uint64_t stack_id) {
      Series& s = series_[std::make_tuple(device, layer, key.api, key.stack_id)];
      s.stack_id = stack_id;
      observe(s, bytes);
    });
    for (auto& [key, s] : series_)
      if (s.seen != boundaries_) observe(s, 0);
  }

  uint64_t boundaries() const { return boundaries_; }
  // Sites that grew: rising in at least half the steps (two at least) and falling in at most a
  // tenth, bytes per step being what they gained from the boundary before their first rise (the
  // first boundary, for one that grew from the trace's start) to the last, over the steps between.
  // Largest first.
  std::vector<SiteGrowth> growing() const;

 private:
  struct Series {
    uint64_t last = 0;  // bytes at the latest boundary
    uint64_t rises = 0, falls = 0;
    uint64_t first_rise_step = 0;
    uint64_t before_rise = 0;        // bytes at the boundary before its first rise
    uint64_t at_first_boundary = 0;  // bytes at the first step boundary
    uint64_t seen = 0;               // the latest boundary it was live at or observed
    uint64_t stack_id = 0;
  };
  void observe(Series& s, uint64_t bytes);

  uint64_t boundaries_ = 0;
  std::map<std::tuple<int32_t, Layer, Api, uint64_t>, Series> series_;
};

}  // namespace memtrace
