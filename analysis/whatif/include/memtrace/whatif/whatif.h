// `memtrace whatif`: a run's requests to PyTorch's caching allocator (the allocated layer: each
// tensor's size, stream, pool, free and record_stream) replayed through the allocator model
// (analysis/allocator_model) of the release that made the run, under other settings: the
// reserved peak each would reach, its segments and holes, and where it would run out of memory.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace memtrace::whatif {

struct PredictedOom {
  uint64_t t_ns = 0;
  uint64_t requested = 0;  // what the tensor asked for
  std::string line;        // where: the user's frame of its stack, or "(no stack)"
};

// One setting's replay of one device.
struct Prediction {
  std::string alloc_conf;  // PYTORCH_CUDA_ALLOC_CONF as replayed ("" for PyTorch's defaults)
  bool as_recorded = false;
  bool adopted = true;  // what was live before the recording taken where it was (the run's own settings)
  uint64_t reserved_peak = 0, segments_at_peak = 0, free_at_peak = 0, largest_free_at_peak = 0;
  uint64_t segments_at_end = 0;
  uint64_t placed_anew = 0;  // blocks live before the recording, allocated again (not where they were)
  std::optional<PredictedOom> oom;
  std::vector<std::string> traps;  // known problems of these settings, with where they were reported
};

struct DeviceWhatIf {
  int32_t device = 0;
  uint64_t reserved_peak = 0, segments_at_peak = 0, segments_at_end = 0;  // as the run had them
  uint64_t requests = 0;                                                  // allocations replayed
  uint64_t recorded_ooms = 0;
  uint64_t capacity = 0;        // what the replay gives PyTorch's allocator
  bool capacity_known = false;  // false: the device's memory is not known, nothing is limited
  uint64_t device_total = 0;    // the device's memory, or --capacity (0: unknown)
  uint64_t outside_most = 0;    // held outside PyTorch's allocator at most (device.used samples)
  std::vector<Prediction> predictions;
};

struct ProcessWhatIf {
  std::string path;
  std::string release;  // "2.11.0+cu130", "2.3" (a snapshot's format), or --release
  bool release_known = false;
  std::string recorded_conf;  // the run's PYTORCH_CUDA_ALLOC_CONF ("" for PyTorch's defaults)
  bool conf_known = false;    // false: the run did not say (memtrace before 0.2; a snapshot before 2.3)
  std::vector<DeviceWhatIf> devices;
};

struct WhatIfOptions {
  std::optional<std::string> alloc_conf;  // one setting; none: the usual candidates
  std::optional<uint64_t> capacity;       // bytes the device has
  std::optional<std::string> release;     // "2.6": the rules of that release
  std::string change;                     // without alloc_conf: one setting, the run's own with this added
};

// Replays the trace at PATH. False with ERROR set (one sentence) when it cannot be read, holds no
// request to PyTorch's allocator, or OPTIONS are wrong (a CONF PyTorch would refuse: the option
// named).
bool what_if(const std::string& path, const WhatIfOptions& options, ProcessWhatIf& out, std::string& error);

// The settings tried when none is given: the run's own, then each usual change to it.
std::vector<std::string> candidate_confs(const std::string& recorded_conf);

// For `frag` and the HTML page: one sentence, the reserved peak the run would have reached with
// expandable_segments:True beside its own, per device; empty where the run made no request to
// PyTorch's allocator or had them on already.
std::string expandable_segments_prediction(const std::string& trace_path);

std::string to_text(const std::vector<ProcessWhatIf>& processes, bool one_setting);
nlohmann::json to_json(const std::vector<ProcessWhatIf>& processes);

}  // namespace memtrace::whatif
