#include "memtrace/engine/analysis_passes.h"

namespace memtrace {

using MakePass = std::unique_ptr<AnalysisPass> (*)(const AnalysisOptions&);

// Every analysis, by the function in its own file that makes it.
std::unique_ptr<AnalysisPass> count_events_per_api(const AnalysisOptions&);
constexpr MakePass kAnalyses[] = {
    count_events_per_api,
};

std::vector<std::unique_ptr<AnalysisPass>> make_analysis_passes(const AnalysisOptions& options) {
  std::vector<std::unique_ptr<AnalysisPass>> passes;
  for (MakePass make : kAnalyses)
    if (make) passes.push_back(make(options));
  return passes;
}

}  // namespace memtrace
