// PyTorch's memory snapshots (the pickles of torch.cuda.memory._dump_snapshot) as memtrace
// traces, so that every analysis reads them as it reads a recording. Every generation: up to 2.0
// (blocks without addresses, their stacks in `history`), 2.1 and 2.2 (blocks with addresses and
// frames), 2.3 and later (`time_us`, expandable segments' segment_map/unmap, external
// annotations). The snapshot's trace is a ring: what was live before it began is reconstructed
// from the final state, walking the trace backwards as PyTorch's own viewer does, and shown as
// live at the start.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "memtrace/format/trace_writer.h"

namespace memtrace {

inline constexpr const char* kTorchSnapshotSource = "PyTorch memory snapshot";

// Writes the snapshot pickled in BYTES (read from PATH) into WRITER, header to footer: the
// reserved layer (its segments) and the allocated layer (blocks handed to tensors, and the
// segments as the heaps they lie in), each event with its frames. False with ERROR set (one
// sentence) when BYTES is not a pickle of plain data, or not a PyTorch memory snapshot.
// DONE_WITH(begin, end), when given, is told of byte ranges of BYTES the import will not read
// again soon (a file mapping can let them go; the import may read them again later).
using ReleaseBytes = std::function<void(size_t begin, size_t end)>;
// SPILL false: the second pass reads the entries again from BYTES, not from a temporary file (the
// same trace; where no temporary file can be made, that is what it does).
bool import_torch_snapshot(std::string_view bytes, const std::string& path, TraceWriter& writer, std::string& error,
                           const ReleaseBytes& done_with = nullptr, bool spill = true);

// The same in two steps, for a reader that reads the trace while it is written (on another
// thread): check() reads the snapshot through and says now what keeps it from being imported;
// write() then writes the trace into WRITER, header to footer. Each false with error() set (one
// sentence). BYTES, PATH and WRITER outlive it. check() may read on up to WALKERS threads at once.
class TorchSnapshotImport {
 public:
  TorchSnapshotImport(std::string_view bytes, const std::string& path, TraceWriter& writer,
                      const ReleaseBytes& done_with = nullptr, unsigned walkers = 1);
  ~TorchSnapshotImport();
  bool check();
  bool write();
  const std::string& error() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// What one reading of PyTorch's own recorder held (torch_history.h).
struct TorchHistoryReading {
  std::string when;           // "exit", "oom", ...
  bool ring_wrapped = false;  // PyTorch's ring went round since the reading before: events were lost
  bool untimed = false;       // its entries have no time_us (2.1)
};
inline constexpr uint64_t kUntimedEvent = UINT64_MAX;
// Appends to OUT the allocated layer's events of a reading of PyTorch's own recorder that the
// Python shim wrote (a _snapshot()'s device_traces with the clocks of the moment), their stacks
// interned in WRITER, each at its time on the trace's clock (whose origin is ORIGIN_MONOTONIC_NS),
// or at kUntimedEvent where PyTorch kept no time. False with ERROR set when BYTES is not one.
bool read_torch_history(std::string_view bytes, const std::string& path, uint64_t origin_monotonic_ns,
                        TraceWriter& writer, std::vector<Event>& out, TorchHistoryReading& reading, std::string& error);

}  // namespace memtrace
