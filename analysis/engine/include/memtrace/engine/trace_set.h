// Opening what a user names: one trace file, or an output folder of them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "memtrace/engine/report.h"
#include "memtrace/format/trace_reader.h"

namespace memtrace {

// Opens what PATH names as a trace: a memtrace trace (.memtrace, .memsnap), or a PyTorch memory
// snapshot pickle, read as the trace it describes. Null with ERROR set (one sentence) otherwise.
std::unique_ptr<TraceReader> open_trace(const std::string& path, std::string& error);

struct AnalysisOptions;
struct ProcessAnalysis;
// Analyzes every trace PATH names (a folder: all its processes). False with ERROR set when there
// is none, or one is not a readable trace; a cut trace adds a line to WARNINGS.
bool analyze_path(const std::string& path, const AnalysisOptions& options, std::vector<ProcessAnalysis>& out,
                  std::vector<std::string>& warnings, std::string& error);

}  // namespace memtrace
