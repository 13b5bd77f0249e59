// `memtrace html`: one self-contained page (no request leaves it) that shows a run's memory over
// time per device and layer, the largest allocations one by one, a flame graph of what was live at
// the peak, the top sites, growth per step, fragmentation and out-of-memory failures; for a run of
// several processes, the job page (html_job.cpp) links each process's own page. Its size is
// bounded whatever the trace's length: the timeline is bucketed, and only the largest allocations
// are drawn one by one.
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

// The job page (several processes): what it draws, from PROCESSES analyzed with the timeline on,
// each process's own page at PAGES[i] (relative to the job page; empty: none), and the page.
nlohmann::json job_data(const std::vector<ProcessAnalysis>& processes, const std::vector<std::string>& pages);
std::string job_page(const nlohmann::json& data);
// False when this memtrace was built without uPlot (npm's): it writes no page.
bool html_report_available();

}  // namespace memtrace
