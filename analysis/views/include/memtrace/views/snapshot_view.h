// `memtrace snapshot`: what a snapshot file says, diagnosis first.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "memtrace/engine/process_analysis.h"
#include "memtrace/engine/report.h"
#include "memtrace/engine/trace_set.h"

namespace memtrace {

struct SnapshotReport {
  std::string path;
  int32_t pid = 0;
  std::string reason;         // oom, demand, periodic, peak; "end" for a PyTorch snapshot (its final state)
  std::string imported_from;  // what the snapshot was read from: a PyTorch memory snapshot
  uint64_t time_ns = 0;
  int32_t device = -1;
  bool outcome_known = false, recovered = false, fatal = false;
  std::optional<Event> request;
  std::vector<FrameView> request_stack;
  std::string request_location;
  uint64_t device_free_bytes = 0, device_total_bytes = 0;
  uint64_t live_bytes = 0, live_count = 0;
  // The allocated layer then (PyTorch's tensors), when the snapshot has one: its sites are then
  // those of the allocated layer.
  bool allocated_known = false;
  uint64_t allocated_bytes = 0, allocated_count = 0;
  std::vector<SiteTotal> sites;  // largest first
  size_t recent_events = 0;
  std::string diagnosis;
  std::string problem;  // the file was read only in part
};

// Reads the snapshot at PATH: its sites grouped as OPTIONS say (top_sites, grouping,
// keep_cuda_frames).
bool read_snapshot(const std::string& path, const AnalysisOptions& options, SnapshotReport& out, std::string& error);

nlohmann::json to_json(const SnapshotReport& snapshot);
std::string to_text(const SnapshotReport& snapshot);

// memtrace snapshot: one snapshot or several (a folder of them).
struct SnapshotView {
  std::vector<SnapshotReport> snapshots;
};
// Reads every snapshot in FILES; false with ERROR set at the first that cannot be read.
bool snapshot_view(const std::vector<std::string>& files, const AnalysisOptions& options, SnapshotView& out,
                   std::string& error);
nlohmann::json to_json(const SnapshotView& view);  // one snapshot: its own document
std::string to_text(const SnapshotView& view);

}  // namespace memtrace
