// What /proc says of a process memtrace records but did not start (memtrace.record's, memtrace
// attach's): whether it still runs.
#pragma once

#include <sys/types.h>

#include <optional>

namespace memtrace {

// PID's effective user and group, as /proc/PID/status says (its /proc/PID folder is root's when
// the process is not dumpable: a program that changed its user without exec).
struct ProcessIds {
  uid_t uid;
  gid_t gid;
};
std::optional<ProcessIds> process_ids(int pid);

// Whether PID runs (a zombie, dead and not yet waited for by its parent, does not).
bool running(int pid);

}  // namespace memtrace
