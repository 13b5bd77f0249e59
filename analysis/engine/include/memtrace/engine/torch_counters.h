// PyTorch's own counters (torch.cuda.memory_stats, recorded by the Python shim at exit and at
// each out-of-memory) beside memtrace's reading of the same moments, so that every run on a GPU
// checks memtrace against PyTorch: the bytes tensors asked for (requested_bytes) and PyTorch's
// segments (reserved_bytes) must agree to the byte; its blocks (allocated_bytes) show the
// allocator's rounding, which memtrace does not see.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "memtrace/engine/replay.h"

namespace memtrace {

// One of PyTorch's figures, and memtrace's own for the same quantity where it has one.
struct TorchCounterCheck {
  std::string figure;  // as memory_stats names it: "requested_bytes.all.peak"
  int64_t pytorch = 0;
  std::optional<int64_t> memtrace;
  bool agrees() const { return !memtrace || *memtrace == pytorch; }
};

// PyTorch's counters of one device at one moment.
struct TorchCounters {
  int32_t device = -1;
  std::string when;  // "exit" or "oom"
  uint64_t t_ns = 0;
  std::map<std::string, int64_t> figures;
  std::vector<TorchCounterCheck> checks;  // filled by TorchCounterTracker
  bool reset_seen = false;                // the program reset PyTorch's peaks: memtrace's peaks are since then
  bool agrees() const {
    for (const TorchCounterCheck& c : checks)
      if (!c.agrees()) return false;
    return true;
  }
  // allocated_bytes.all.peak - requested_bytes.all.peak: the blocks' rounding at their peaks.
  std::optional<int64_t> rounding_at_peak() const;
};

// Follows the allocated layer PyTorch described and its counters, event by event.
class TorchCounterTracker {
 public:
  // NAME: the event's name (torch.counter's).
  void add(const Event& e, const ReplayStep& step, std::string_view name);
  // Per device, the last counters at exit, then every out-of-memory's, in order.
  std::vector<TorchCounters> finish();

 private:
  struct Device {
    int64_t requested = 0, requested_peak = 0;  // torch.alloc's bytes live, and their peak since the last reset
    int64_t segments = 0, segments_peak = 0;    // PyTorch's segments (torch.segment_*), likewise
    uint64_t ooms = 0;
    bool reset = false;
    std::optional<TorchCounters> open;  // the counters being read (one batch of torch.counter events)
    std::optional<TorchCounters> at_exit;
  };
  void close(Device& d);
  std::map<int32_t, Device> devices_;
  std::vector<TorchCounters> ooms_;
  bool tensors_seen_ = false, segments_seen_ = false;
};

}  // namespace memtrace
