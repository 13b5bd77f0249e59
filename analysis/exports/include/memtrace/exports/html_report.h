// `memtrace html`: one self-contained page (no request leaves it) that shows a run's memory over
// time per device and layer, the largest allocations one by one, a flame graph of what was live at
// the peak, the top sites, growth per step, fragmentation, out-of-memory failures and one tab per
// process. Its size is bounded whatever the trace's length: the timeline is bucketed, and only
// the largest allocations are drawn one by one.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "memtrace/engine/process_analysis.h"

namespace memtrace {

struct HtmlOptions {
  size_t largest_allocations = 20000;  // drawn one by one; the rest of each layer as one band
};

// The analysis options the page needs from each process's pass.
AnalysisOptions html_analysis_options(const HtmlOptions& options);

// The data the page draws (what it embeds), from PROCESSES analyzed with html_analysis_options.
nlohmann::json html_data(const std::vector<ProcessAnalysis>& processes);

// The whole page.
std::string html_page(const nlohmann::json& data);
// False when this memtrace was built without uPlot (npm's): it writes no page.
bool html_report_available();

}  // namespace memtrace
