// A run's output folder, named and found in one place: what `memtrace run` writes into it, and
// what the analyses look for there.
//   <pid>.memtrace (<pid>.<image>.memtrace for a process's later exec'd images, -<n> before the
//     extension where the name was taken)    a process's trace
//   <reason>-<pid>[-<n>].memsnap              its snapshots (oom, demand, periodic, peak)
//   <pid>.torch-history-<n>.pickle            what PyTorch's own recorder kept, until merged
//   <pid>.memsum                               the trace's summary (memtrace summarize)
// A job's folder holds each node's output folder.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace memtrace::run_folder {

inline constexpr std::string_view kTraceExtension = ".memtrace";
inline constexpr std::string_view kSnapshotExtension = ".memsnap";
inline constexpr std::string_view kSummaryExtension = ".memsum";  // memtrace summarize, beside its trace

// The trace file of process PID's IMAGE-th image (0: the first) in DIR, the Nth of that name.
std::string trace_name(const std::string& dir, int32_t pid, int image, int n);
// The Nth snapshot of process PID for REASON ("oom", ...) in DIR.
std::string snapshot_name(const std::string& dir, const char* reason, int32_t pid, uint32_t n);
// The Nth reading of PyTorch's own recorder by process PID, in DIR.
std::string torch_history_name(const std::string& dir, int32_t pid, uint32_t n);

// Whether the file at PATH begins as memtrace's traces and snapshots do (framing::kMagic).
bool is_memtrace_file(const std::string& path);
bool is_memtrace_header(std::string_view head);

// Whether DIR holds traces of its own (a run's folder).
bool holds_traces(const std::string& dir);
// The traces under PATH: PATH itself when it is a file; every trace in it and its folders (a job's)
// when it is a folder, in name order. Empty with ERROR set when there are none.
std::vector<std::string> find_traces(const std::string& path, std::string& error);
// As find_traces, and the summaries whose traces are not beside them (a job's folder of nodes'
// summaries): what the analysis commands read.
std::vector<std::string> find_traces_and_summaries(const std::string& path, std::string& error);
// The snapshots at PATH: itself, or those in the folder, in name order.
std::vector<std::string> find_snapshots(const std::string& path, std::string& error);
// The snapshots of process PID beside its trace TRACE_PATH, in name order.
std::vector<std::string> snapshots_of(const std::string& trace_path, int32_t pid);
// The readings of PyTorch's own recorder by process PID beside its trace, in the order written.
std::vector<std::string> torch_history_of(const std::string& trace_path, int32_t pid);

}  // namespace memtrace::run_folder
