// `memtrace report` as text for the terminal and as JSON for scripts.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "memtrace/analysis/report.h"

namespace memtrace {

// The JSON contract of `memtrace report --json` (fields are added, never removed or renamed).
nlohmann::json report_json(const std::vector<ProcessReport>& processes);
std::string report_text(const std::vector<ProcessReport>& processes);
// A stack as JSON: [{"kind","function","file","line","module",...}], innermost first.
nlohmann::json stack_json(const std::vector<FrameView>& frames);
// A site: {"api","bytes","count","location","stack"}, and what its stack is missing, if anything.
nlohmann::json site_json(const SiteTotal& site);
std::string command_line(const std::vector<std::string>& command);

}  // namespace memtrace
