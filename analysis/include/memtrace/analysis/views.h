// What `memtrace peak`, `leaks`, `frag`, `timeline`, `diff` and `check` print: each a JSON
// document (the contract of --json; fields are added, never removed) and a text for the terminal,
// both made from the analyses of one or more processes.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "memtrace/analysis/process_analysis.h"

namespace memtrace {

struct PeakOptions {
  Layer layer = Layer::kReserved;  // or kAllocated
  std::optional<int32_t> device;   // all devices when unset
};
nlohmann::json peak_json(const std::vector<ProcessAnalysis>& processes, const PeakOptions& options);
std::string peak_text(const nlohmann::json& peak);

nlohmann::json leaks_json(const std::vector<ProcessAnalysis>& processes);
std::string leaks_text(const nlohmann::json& leaks);

nlohmann::json frag_json(const std::vector<ProcessAnalysis>& processes);
std::string frag_text(const nlohmann::json& frag);

// The timeline: a terminal chart WIDTH columns wide, a CSV, a standalone SVG with phases shaded.
std::string timeline_text(const std::vector<ProcessAnalysis>& processes, size_t width);
nlohmann::json timeline_json(const std::vector<ProcessAnalysis>& processes);
std::string timeline_csv(const std::vector<ProcessAnalysis>& processes);
std::string timeline_svg(const std::vector<ProcessAnalysis>& processes);

// Sites are matched by API and location, or by their whole stack when grouped by stack.
nlohmann::json diff_json(const std::vector<ProcessAnalysis>& base, const std::vector<ProcessAnalysis>& next,
                         SiteGrouping grouping);
std::string diff_text(const nlohmann::json& diff);

struct CheckLimits {
  std::optional<uint64_t> max_peak, max_leaked, max_growth_per_step;
  std::optional<double> max_regression_percent;  // with a baseline
};
struct CheckResult {
  nlohmann::json json;  // {"passed": bool, "limits": [{"name","limit","actual","passed","sites"}]}
  bool passed = true;
};
CheckResult check(const std::vector<ProcessAnalysis>& processes, const CheckLimits& limits,
                  const std::vector<ProcessAnalysis>* baseline);
std::string check_text(const CheckResult& result);
std::string check_junit(const CheckResult& result);

}  // namespace memtrace
