// What lay outside a device's reserved layer, as the device layer's samples tell it apart: what
// stream-ordered pools kept, what CUDA graphs reserved, what other processes held.
#pragma once

#include <algorithm>
#include <cstdint>

#include "memtrace/format/api.h"

namespace memtrace {

// What lay outside a device's reserved layer, as far as memtrace can tell it apart (the rest: the
// CUDA context, library workspaces, whatever else the device holds).
struct OutsideParts {
  uint64_t pools_held = 0;             // kept by stream-ordered pools beyond their allocations (device.pool_held)
  uint64_t graphs_reserved = 0;        // reserved by CUDA graphs for their memory nodes (device.graph_reserved)
  uint64_t other_processes = 0;        // held by other processes on the device (device.other_processes, NVML)
  bool other_processes_known = false;  // NVML told: the rest holds no other process's memory
  // Not a part: what NVML reported this process used (device.process_used), as nvidia-smi shows
  // it; at a peak, the most it reported in the run (read again whenever the device's use grew by
  // 1%), which what the process held at its peak should match.
  uint64_t nvml_process = 0;
  // The part an observation of API sets; null for another API.
  uint64_t* part(Api api) {
    return api == Api::kDevicePoolHeld         ? &pools_held
           : api == Api::kDeviceGraphReserved  ? &graphs_reserved
           : api == Api::kDeviceOtherProcesses ? &other_processes
           : api == Api::kDeviceProcessUsed    ? &nvml_process
                                               : nullptr;
  }
  // The parts, each cut to what OUTSIDE leaves of it after the ones before.
  OutsideParts within(uint64_t outside) const {
    OutsideParts p;
    p.other_processes_known = other_processes_known;
    p.nvml_process = nvml_process;
    p.pools_held = std::min(pools_held, outside);
    p.graphs_reserved = std::min(graphs_reserved, outside - p.pools_held);
    p.other_processes = std::min(other_processes, outside - p.pools_held - p.graphs_reserved);
    return p;
  }
  uint64_t total() const { return pools_held + graphs_reserved + other_processes; }
  // What the rest is.
  const char* rest() const {
    return other_processes_known ? "the CUDA context, library workspaces"
                                 : "the CUDA context, library workspaces, other processes";
  }
};

}  // namespace memtrace
