// `memtrace export --format memory-viz`: a trace as a PyTorch memory snapshot, for
// pytorch.org/memory_viz (Active Memory Timeline, Allocator State History, Active Cached Segment
// Timeline) and for `torch.cuda.memory._snapshot()`'s other readers. The allocated layer, when the
// trace has one (PyTorch's own events, or an allocator's NVTX heaps and regions): its heaps are the
// segments, its regions the blocks. A trace of the reserved layer only exports each allocation as
// a segment holding one block. Segments are the final state, their blocks tiling each in address
// order (active_allocated, active_pending_free, inactive); device_traces hold the events, frames
// innermost first.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace memtrace {

struct MemoryVizOptions {
  // Events kept per device, the last ones, as PyTorch's max_entries keeps them: the viewer
  // reconstructs what came before from the final state. Its pages slow down past a few hundred
  // thousand.
  size_t max_entries = 200000;
  bool json = false;  // JSON instead of a pickle (protocol 4)
  bool keep_cuda_frames = false;
};

// The snapshot of the one process in TRACE, in OUT. False with ERROR set when it cannot be read;
// what the export leaves out (events beyond max_entries) is said in WARNINGS.
bool export_memory_viz(const std::string& trace, const MemoryVizOptions& options, std::string& out,
                       std::vector<std::string>& warnings, std::string& error);

}  // namespace memtrace
