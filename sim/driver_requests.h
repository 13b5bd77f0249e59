// What programs and runtimes ask of the simulated driver's lookups, for the tests that hold our
// runtime against NVIDIA's: with MEMTRACE_SIM_DRIVER_REQUESTS=FILE (`%p` in FILE becomes the pid),
// the driver appends one line per request, in the order it came:
//   lookup <name> <version> <flags> <found|missing>   cuGetProcAddress(_v2)
//   export-table <uuid> <found|missing>               cuGetExportTable
//   call cuInit                                       cuInit
// Lines are written whole with one write(2), so threads never interleave within a line.
#pragma once

#include <cuda.h>

namespace sim {

void log_lookup(const char* name, int version, unsigned long long flags, bool found);
void log_export_table(const CUuuid* id, bool found);
void log_call(const char* name);

}  // namespace sim
