// PyTorch's own recorder, where memtrace cannot attach to its allocator live: the readings the
// Python shim wrote beside a process's trace (run_folder::torch_history_of: what
// torch.cuda.memory._record_memory_history kept since the reading before) merged into the trace,
// on its clock, when the process has ended. The collector calls it; so can a person, on a run
// whose collector could not.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace memtrace {

// Rewrites the trace at TRACE_PATH with the allocated layer's events of READINGS among its own, in
// time order (a copy renamed over it: the trace is whole at every moment), and removes the
// readings. Entries without times (PyTorch 2.1) are placed by the segments they share with the
// recorded cudaMalloc and cudaFree calls. The trace's notices say what was merged, and what PyTorch's
// ring lost. False with ERROR set when it cannot (the trace and the readings are then left as they
// were).
bool merge_torch_history(const std::string& trace_path, const std::vector<std::string>& readings, std::string& error);

}  // namespace memtrace
