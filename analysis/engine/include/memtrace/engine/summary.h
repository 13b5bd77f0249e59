// A trace's summary (memtrace summarize): what every analysis command needs of one process, made
// where the trace is and read in its place, so that a job's nodes send kilobytes, not traces. A
// summary keeps the process's analysis under the options it was made with (one entry for the
// commands' sites, one for the HTML page's); a command asking for other options is told how to
// make a summary that has them.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

#include "memtrace/engine/process_analysis.h"

namespace memtrace {

// Whether HEAD (a file's first bytes) begins a summary.
bool is_summary_header(std::string_view head);

// Where the summary of the trace at TRACE_PATH goes: beside it, .memtrace replaced by .memsum
// (run_folder::kSummaryExtension).
std::string summary_path_of(const std::string& trace_path);
// The trace a summary at SUMMARY_PATH stands for (beside it, .memtrace).
std::string trace_path_of(const std::string& summary_path);

// One analysis of the process and the options it was made with.
struct SummaryEntry {
  AnalysisOptions options;
  ProcessAnalysis analysis;
};

// Writes ENTRIES to PATH (written beside and renamed over: a reader never sees half of one, and a
// link at PATH is replaced, not followed), with MODE: the trace's own, never more open than it.
// False with ERROR set.
bool write_summary(const std::string& path, const std::vector<SummaryEntry>& entries, std::string& error,
                   mode_t mode = 0600);

// Reads the summary at PATH and gives the analysis WANTED asks for: an entry made with the same
// sites, steps and frames, with the timeline and the largest allocations if WANTED asks for them
// (what it does not ask for is left out, as an analysis of the trace would leave it). False with
// ERROR set (one sentence: what the summary lacks and how to make one that has it).
bool read_summary(const std::string& path, const AnalysisOptions& wanted, ProcessAnalysis& out, std::string& error);

// Analyzes the trace at TRACE_PATH once for each of OPTIONS and writes its summary beside it;
// false with ERROR set. BYTES: the summary's size. The summary has the trace's mode: who cannot
// read the trace cannot read its summary.
bool summarize_trace(const std::string& trace_path, const std::vector<AnalysisOptions>& options, size_t& bytes,
                     std::string& error);

}  // namespace memtrace
