// `memtrace attach PID` and `memtrace detach PID`: recording a process that is already running.
// attach loads the injector into it (collector/attach/remote_thread.h), records as memtrace.record
// does (its collector: `memtrace _record --attached`), and leaves after --for, on Ctrl-C or on
// `memtrace detach PID`; the process runs on as before.
#pragma once

#include <cstdint>
#include <string>

namespace memtrace {

struct AttachOptions {
  int pid = 0;
  std::string output_dir;    // empty: memtrace-YYYYmmdd-HHMMSS in the current folder
  uint64_t duration_ns = 0;  // --for; 0: until Ctrl-C, memtrace detach or the process's end
  bool snapshot = false;     // one snapshot of what is live now, then leave
  int stack_depth = 64;
  bool native_stacks = true;
  bool python_stacks = true;
  int compression = 1;
  bool summary = true;
};

// 0 once recorded and detached (SNAPSHOT_PATH: the --snapshot written); 1 when PID cannot be
// joined (one sentence on stderr says why; the process is left untouched); 125 when memtrace
// itself cannot start.
int attach_command(const AttachOptions& options, std::string* snapshot_path = nullptr);

// Asks the memtrace attach joined to PID to leave; 0 once it has, 1 when none is attached.
int detach_command(int pid);

}  // namespace memtrace
