// Exports for other tools: folded stacks (flamegraph.pl, speedscope) of what was live at the peak
// or at the end, a Chrome trace (counter tracks per device and layer, allocations as async events,
// NVTX ranges as slices, marks as instants), and the same in Perfetto's protobuf format.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "memtrace/engine/process_analysis.h"

namespace memtrace {

// One line per stack, root first, frames separated by ';', then the bytes: "pid 12;main;f;g 4096".
// PROCESSES must be analyzed with SiteGrouping::kStack and enough top sites to hold them all.
std::string export_folded(const std::vector<ProcessAnalysis>& processes, bool at_peak);

// Streams TRACES to OUT as Chrome trace-event JSON. False with ERROR set when a trace cannot be
// opened; a cut trace exports what it holds and adds a line to WARNINGS.
bool export_chrome(const std::vector<std::string>& traces, std::FILE* out, std::vector<std::string>& warnings,
                   std::string& error);

// The same as Perfetto's own protobuf trace (export_perfetto.cpp): counter tracks per device and
// layer, allocations as slices on lanes with their stacks, NVTX ranges and marks, failures.
bool export_perfetto(const std::vector<std::string>& traces, std::FILE* out, std::vector<std::string>& warnings,
                     std::string& error);

}  // namespace memtrace
