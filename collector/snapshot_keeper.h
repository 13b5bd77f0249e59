// Snapshots of one traced process: on out-of-memory (written the moment the failure arrives,
// whatever happens to the process next), on demand, periodically, and at its peak. A snapshot
// is a trace file of its own (.memsnap): the allocations live at that moment with their stacks,
// the failed request, what the device had, and the last events before it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "memtrace.pb.h"
#include "memtrace/engine/pass.h"
#include "memtrace/format/trace_writer.h"

namespace memtrace {

struct SnapshotOptions {
  std::string dir;
  int compression = 1;
  int max_oom = 8;       // OOM snapshots per process at most
  bool at_peak = false;  // keep one of the peak of reserved memory
  unsigned file_mode = 0600;
};

class SnapshotKeeper : public PassWithBefore {
 public:
  static constexpr size_t kRecentEvents = 1000;

  SnapshotKeeper(const SnapshotOptions& options, const pb::TraceHeader& header, const TraceWriter& trace)
      : options_(options), header_(header), trace_(trace) {}

  // Every event of the process, before and after the replay applies it.
  void before(const Event& event, const Replay& replay) override;
  void on_event(const Event& event, const ReplayStep& step, const Replay& replay) override;
  // A snapshot of the process as it is now (on demand, periodic).
  void take(pb::Snapshot::Reason reason, uint64_t now_ns, const Replay& replay);
  // The process ended: OOM snapshots learn whether it died of them; the peak snapshot is written.
  void finish(std::optional<int> exit_status, const Replay& replay);

  const std::vector<std::string>& paths() const { return paths_; }
  const std::vector<std::string>& errors() const { return errors_; }

 private:
  using Live = std::vector<std::pair<uint64_t, LiveAllocation>>;
  struct Pending {
    std::string path;
    pb::Snapshot info;
    uint64_t offset, size;
  };
  static Live live_now(const Replay& replay);
  // Writes PATH; returns where its Snapshot chunk went (for OOM snapshots to settle later).
  std::optional<Pending> write(const std::string& path, pb::Snapshot info, Live live,
                               const std::optional<Event>& request);
  void settle(bool last_fatal);
  std::string name(const char* kind, uint32_t n) const;

  SnapshotOptions options_;
  pb::TraceHeader header_;
  const TraceWriter& trace_;   // the process's trace: its stacks are copied into snapshots
  std::vector<Event> recent_;  // the newest kRecentEvents, a ring: the next goes at recent_next_
  size_t recent_next_ = 0;
  std::vector<Pending> pending_;  // OOM snapshots whose outcome is not known yet
  std::vector<std::string> paths_, errors_;
  uint32_t oom_count_ = 0, demand_count_ = 0, periodic_count_ = 0;
  // The peak of all devices' reserved memory (the replay's), and what was live then.
  uint64_t peak_bytes_ = 0, peak_time_ = 0;
  bool peak_unsaved_ = false;
  Live at_peak_;
  // PyTorch's caching allocator is heard from: a cudaMalloc it fails is no OOM of the program's
  // (PyTorch frees its cache and tries again); the OOM is the one PyTorch raises (torch.oom).
  bool torch_allocator_ = false;
};

}  // namespace memtrace
