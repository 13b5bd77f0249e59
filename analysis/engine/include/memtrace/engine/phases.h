// Phases and steps from NVTX: the ranges a program opened and closed, its marks, and the steps a
// chosen range or mark delimits. Analyses ask which step and which ranges a moment fell in.
#pragma once

#include <cstdint>
#include <regex>
#include <string>
#include <unordered_map>
#include <vector>

#include "memtrace/format/event.h"
#include "memtrace/format/trace_reader.h"

namespace memtrace {

struct PhaseRange {
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;  // the trace's end for a range never closed
  uint32_t tid = 0;
  uint32_t depth = 0;  // push/pop nesting on its thread; 0 for start/end ranges
  std::string name;
};

// The PyTorch integration's step marker, and the ranges PyTorch's NVTX emission gives optimizer
// steps ("Optimizer.step#SGD.step").
inline constexpr const char* kDefaultStepPattern = R"(memtrace\.step|Optimizer\.step#.*)";

class PhaseTracker {
 public:
  // STEP_PATTERN: a regular expression the whole name of a step's mark or range must match.
  PhaseTracker(const TraceReader& reader, const std::string& step_pattern);

  // Feeds one event; only marks and range edges matter (NVTX's, and memtrace's Python shim's).
  void add(const Event& e) {
    if (e.op() == Op::kMark) add_mark(e);
  }
  // Closes ranges left open at END_NS.
  void finish(uint64_t end_ns);

  // Steps: each begins at a match of the pattern (a mark, or a range's start). Step 0 is what
  // came before the first.
  const std::vector<uint64_t>& step_starts() const { return step_starts_; }
  // The step a moment fell in: 0 before the first marker, n after the n-th.
  uint64_t step_at(uint64_t t_ns) const;
  // Completed ranges, in order of their end (at most kMaxRanges; `ranges_dropped` counts the rest).
  const std::vector<PhaseRange>& ranges() const { return ranges_; }
  uint64_t ranges_dropped() const { return ranges_dropped_; }
  // The innermost range open at T_NS on thread TID, else on any thread; empty if none.
  std::string phase_at(uint64_t t_ns, uint32_t tid) const;

  static constexpr size_t kMaxRanges = 1'000'000;

 private:
  void add_mark(const Event& e);
  void close(PhaseRange range, uint64_t end_ns);
  bool is_step(uint64_t name_id);

  const TraceReader& reader_;
  std::regex step_pattern_;
  std::unordered_map<uint64_t, bool> is_step_;  // by string id
  std::vector<uint64_t> step_starts_;
  std::vector<PhaseRange> ranges_;
  uint64_t ranges_dropped_ = 0;
  std::unordered_map<uint32_t, std::vector<PhaseRange>> pushed_;  // open push/pop ranges by thread
  std::unordered_map<uint64_t, PhaseRange> started_;              // open start/end ranges by id
};

}  // namespace memtrace
