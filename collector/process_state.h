// What /proc says of a process memtrace records but did not start (memtrace.record's, memtrace
// attach's): whether it still runs.
#pragma once

namespace memtrace {

// Whether PID runs (a zombie, dead and not yet waited for by its parent, does not).
bool running(int pid);

}  // namespace memtrace
