// Opening what a user names: one trace file, or an output folder of them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "memtrace/analysis/report.h"
#include "memtrace/format/trace_reader.h"

namespace memtrace {

// The trace files PATH names, in a stable order; empty with ERROR set when there are none.
std::vector<std::string> find_traces(const std::string& path, std::string& error);

struct AnalysisOptions;
struct ProcessAnalysis;
// Analyzes every trace PATH names (a folder: all its processes). False with ERROR set when there
// is none, or one is not a readable trace; a cut trace adds a line to WARNINGS.
bool analyze_path(const std::string& path, const AnalysisOptions& options, std::vector<ProcessAnalysis>& out,
                  std::vector<std::string>& warnings, std::string& error);

}  // namespace memtrace
