// How many events of each API the trace holds (report --json: counts.events_per_api): the
// smallest analysis, and the pattern for a new one.
#include <array>

#include "memtrace/engine/analysis_passes.h"

namespace memtrace {

namespace {

class EventsPerApi : public AnalysisPass {
 public:
  void on_event(const Event& event, const ReplayStep&, const Replay&) override {
    ++counts_[static_cast<size_t>(event.api)];
  }
  void report(ProcessAnalysis& out) override {
    auto& table = out.report.counts["events_per_api"];
    for (size_t api = 0; api < counts_.size(); ++api)
      if (counts_[api]) table[std::string(api_name(static_cast<Api>(api)))] = counts_[api];
  }

 private:
  std::array<uint64_t, static_cast<size_t>(Api::kCount)> counts_{};
};

}  // namespace

std::unique_ptr<AnalysisPass> count_events_per_api(const AnalysisOptions&) { return std::make_unique<EventsPerApi>(); }

}  // namespace memtrace
