// PyTorch's memory snapshots (the pickles of torch.cuda.memory._dump_snapshot) as memtrace
// traces, so that every analysis reads them as it reads a recording. Every generation: up to 2.0
// (blocks without addresses, their stacks in `history`), 2.1 and 2.2 (blocks with addresses and
// frames), 2.3 and later (`time_us`, expandable segments' segment_map/unmap, external
// annotations). The snapshot's trace is a ring: what was live before it began is reconstructed
// from the final state, walking the trace backwards as PyTorch's own viewer does, and shown as
// live at the start.
#pragma once

#include <string>
#include <string_view>

#include "memtrace/format/trace_writer.h"

namespace memtrace {

inline constexpr const char* kTorchSnapshotSource = "PyTorch memory snapshot";

// Writes the snapshot pickled in BYTES (read from PATH) into WRITER, header to footer: the
// reserved layer (its segments) and the allocated layer (blocks handed to tensors, and the
// segments as the heaps they lie in), each event with its frames. False with ERROR set (one
// sentence) when BYTES is not a pickle of plain data, or not a PyTorch memory snapshot.
bool import_torch_snapshot(std::string_view bytes, const std::string& path, TraceWriter& writer, std::string& error);

}  // namespace memtrace
