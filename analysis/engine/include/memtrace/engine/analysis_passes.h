// The analyses a process's replay runs beside the report's own trackers (process_analysis.cpp).
// Each is a pass in a file of its own that, when the replay has ended, puts what it found into the
// process's report; adding one is its file and its line in analysis_passes.cpp.
#pragma once

#include <memory>
#include <vector>

#include "memtrace/engine/pass.h"
#include "memtrace/engine/process_analysis.h"

namespace memtrace {

class AnalysisPass : public Pass {
 public:
  // After the replay: what it found, into OUT.
  virtual void report(ProcessAnalysis& out) = 0;
};

// One of each registered analysis, for one process.
std::vector<std::unique_ptr<AnalysisPass>> make_analysis_passes(const AnalysisOptions& options);

}  // namespace memtrace
