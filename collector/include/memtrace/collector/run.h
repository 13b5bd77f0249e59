// `memtrace run`: start a program with the injector, collect every traced process's events into
// one trace each, print a summary, and exit with the program's exit status.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace memtrace {

struct RunOptions {
  std::string output_dir;  // empty: memtrace-YYYYmmdd-HHMMSS in the current folder
  bool sim = false;
  std::optional<uint64_t> sim_capacity;
  std::optional<int> sim_devices;
  int stack_depth = 64;
  int compression = 1;  // zstd level per chunk; 0: none
  int max_oom_snapshots = 8;
  uint64_t snapshot_every_ns = 0;  // 0: no periodic snapshots
  bool snapshot_at_peak = false;
  uint64_t max_stall_ns = 10'000'000'000ull;  // how long a program waits for a stalled collector
  bool redact_args = false;                   // traces keep the program's name and its arguments' positions only
  std::optional<unsigned> umask;              // output permissions: folders 0777 & ~umask, files 0666 & ~umask
  bool append = false;                        // an output folder may already hold another run's traces
  bool native_stacks = true;
  bool python_stacks = true;
  std::string backend = "auto";  // auto, preload or cupti (injector/backend.h)
  bool verify = false;           // compare what was recorded with CUPTI's activity records
  bool summary = true;           // memtrace.record: the summary at the end, on stderr
  bool attached = false;         // _record for memtrace attach rather than memtrace.record
  std::vector<std::string> command;
};

// Returns the exit code for `memtrace run`: the program's, 128+N if signal N killed it, or
// 125/126/127 when memtrace could not run it (with a one-line message on stderr).
// OUTPUT_DIR, when given, is set to the folder the traces went to (empty when none was kept).
int run_command(const RunOptions& options, std::string* output_dir = nullptr);

// The collector of memtrace.record (`memtrace _record --pid PID`, started by the memtrace Python
// package inside the program): records process PID, which connects by itself once it has loaded
// the injector. Prints "socket PATH" and "folder DIR" on stdout, then takes commands on stdin, a
// line each, numbered: "N snapshot" (answered "N snapshot PATH" or "N failed WHY"), "N window begin"
// (answered "N window begun") and "N window end" (answered "N window {JSON}": what the stretch
// between them did); "stop" or the end of
// input (the trace is finished and the summary printed on stderr). 0, or 125 when it cannot start.
int record_command(const RunOptions& options, int pid);

}  // namespace memtrace

namespace memtrace {
// memtrace run's own failure (bad options, cannot create its folder): env(1)'s convention.
inline constexpr int kExitMemtraceFailedCode = 125;
}  // namespace memtrace
