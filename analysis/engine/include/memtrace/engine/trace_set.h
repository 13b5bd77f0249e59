// Opening what a user names: one trace file, or an output folder of them.
#pragma once

#include <functional>
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
// Analyzes every trace PATH names (a folder: all its processes), JOBS at once (0: one per core
// this process may run on), each process on a worker of its own; OUT in rank order, the same
// whatever JOBS is. False with ERROR set when there is none, or one is not a readable trace (the
// first such in the folder's order; OUT then unchanged); a cut trace adds a line to WARNINGS.
bool analyze_path(const std::string& path, const AnalysisOptions& options, unsigned jobs,
                  std::vector<ProcessAnalysis>& out, std::vector<std::string>& warnings, std::string& error);

// Runs WORK(0) ... WORK(COUNT - 1), JOBS at once (0: one per core), each index once; once WORK(i)
// fails, no later index is begun. The first index that failed, or COUNT when none did.
size_t for_each_on_cores(size_t count, unsigned jobs, const std::function<bool(size_t)>& work);

// The cores this process may run on (its affinity mask: a container's or taskset's limit).
unsigned usable_cores();

}  // namespace memtrace
