// The per-process report: events by API, and per device the peak of device memory, when it
// happened, what was live at exit, and the largest allocation sites at the peak.
#pragma once

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "memtrace/engine/categories.h"
#include "memtrace/engine/outside_parts.h"
#include "memtrace/engine/owners.h"
#include "memtrace/engine/pass.h"
#include "memtrace/engine/replay.h"
#include "memtrace/engine/stacks.h"
#include "memtrace/engine/torch_counters.h"

namespace memtrace {

struct ApiCounts {
  uint64_t calls = 0;
  uint64_t failed = 0;
  uint64_t bytes = 0;        // allocated by the successful calls, or freed (what they freed)
  uint64_t interrupted = 0;  // calls the process died inside (not in `calls`)
  int32_t last_failure = 0;  // the result of the last call that failed
};

struct SiteTotal {
  Site site;           // api, and the stack of one of its allocations
  uint64_t group = 0;  // what its allocations were grouped by (StackView::site_key)
  uint64_t bytes = 0;
  uint64_t count = 0;
  // Filled in against the trace's tables: what names the site, and that stack as shown.
  std::string location;
  std::vector<FrameView> stack;
  size_t named_frame = 0;  // the frame of STACK that LOCATION names
  uint32_t stack_flags = 0;
};

struct DeviceReport {
  int32_t device = -1;
  std::string name;          // as the driver names it, when the trace says
  uint64_t total_bytes = 0;  // the device's memory, when the trace says
  std::string uuid;          // "GPU-...", when the driver said: tells apart ranks' "device 0"s
  uint64_t peak_bytes = 0;
  uint64_t peak_time_ns = 0;
  uint64_t live_at_exit_bytes = 0;
  uint64_t live_at_exit_count = 0;
  std::vector<SiteTotal> peak_sites;  // largest first
  std::vector<SiteTotal> exit_sites;  // live at the end, largest first
  uint32_t peak_tid = 0;              // the thread whose allocation made the peak
  // Where the peak fell, when the program marked its phases and steps with NVTX.
  uint64_t peak_step = 0;
  std::string peak_phase;
  // The allocated layer's peak by category (parameters, gradients, ...), when the trace tells.
  std::vector<CategoryTotal> peak_categories;
  // Who held the device at the reserved peak (AnalysisOptions::owners), largest first.
  std::vector<OwnerShare> owners_at_peak;
  // The device layer, from memtrace's samples of the device's memory in use (and the figures an
  // out-of-memory reported): what lay outside the reserved layer (the CUDA context, library
  // workspaces, other processes) by the sample nearest before the peak (else the first after),
  // which puts the device at the peak at peak_bytes plus that; and the largest sample itself.
  uint64_t device_samples = 0;
  uint64_t outside_reserved_at_peak_bytes = 0;
  uint64_t outside_sampled_at_ns = 0;
  uint64_t device_used_max_sampled_bytes = 0;
  // Of what lay outside, what memtrace could tell apart, by the same sample.
  OutsideParts outside_parts_at_peak;
  uint64_t device_at_peak_bytes() const { return peak_bytes + outside_reserved_at_peak_bytes; }
  // The device layer's first sample: for a recording begun while the process ran, what the device
  // held at its start (0 ns: none).
  uint64_t first_sample_bytes = 0, first_sample_ns = 0;
  bool first_sampled = false;
  // Allocations the process held before recording began, known from its allocator's own state
  // (EventFlags kEventBeforeRecording), in this layer.
  uint64_t before_recording_bytes = 0, before_recording_count = 0;
};

// An allocation that failed for lack of memory.
struct OomEvent {
  uint64_t t_ns = 0;
  Api api = Api::kUnknown;
  uint64_t size = 0;
  int32_t device = -1;
  uint64_t device_free_bytes = 0, device_total_bytes = 0;
  std::vector<OwnerShare> owners;  // who held the device then (AnalysisOptions::owners)
};

struct ProcessReport {
  int32_t pid = 0;
  std::vector<std::string> command;
  std::string host;
  std::optional<int32_t> rank, local_rank, world_size;  // its place in a distributed job
  std::string imported_from;  // what the trace was read from (a PyTorch snapshot); empty: a recording
  // How recording began, where it began while the process ran: "memtrace attach" or
  // "memtrace.record" (what came before is not in the trace); empty for memtrace run.
  std::string joined_by;
  std::optional<int32_t> exit_status;
  std::string end_reason;
  std::string trace_path;
  bool complete = true;  // the trace ended with its footer
  std::string problem;   // why the trace was read only in part
  uint64_t events = 0;   // the calls recorded (not memtrace's own samples and CUPTI's records)
  uint64_t dropped_events = 0;
  uint64_t longest_wait_ns = 0;      // the longest the program waited for memtrace (room in its ring)
  std::vector<std::string> notices;  // about the recording, a sentence each
  uint64_t captured_events = 0;      // stream-ordered calls made while capturing a CUDA graph
  uint64_t cupti_events = 0;         // recorded from CUPTI's callbacks (the rest: by interposers)
  uint64_t activity_records = 0;     // CUPTI's memory activity records (--verify)
  uint64_t incomplete_records = 0;
  uint64_t unmatched_frees = 0;
  uint64_t pinned_host_peak_bytes = 0;
  uint64_t end_time_ns = 0;
  // Wall-clock time (ns since the epoch) of its run's time origin, which its times count from: what
  // puts the ranks of nodes that started apart on one time axis (0: unknown).
  int64_t origin_unix_ns = 0;
  std::map<Api, ApiCounts> calls;
  std::vector<DeviceReport> devices;  // by device ordinal
  std::vector<OomEvent> oom_events;
  std::vector<std::string> snapshots;  // snapshot files of this process beside its trace
  // What each analysis pass (analysis_passes.h) counted, by its name, then by what it counted.
  std::map<std::string, std::map<std::string, uint64_t>> counts;
  // PyTorch's own counters beside memtrace's figures (the shim recorded them: at exit, at OOMs).
  std::vector<TorchCounters> pytorch_counters;
};

// Names each site and fills in its stack as shown (resolve_site), then tells apart the ones that
// would read alike (distinguish_sites).
void resolve_sites(std::vector<SiteTotal>& sites, const StackView& stacks, SiteGrouping grouping);

// Builds a ProcessReport from the replay of one process's events. Sites are grouped by API and
// by what SITE_KEY makes of their stack id (by default the stack itself). Peaks and sites are
// those of LAYER: reserved (what the allocation APIs hold) or allocated (regions of heaps). With
// TOP_SITES 0, no site is kept at all (the collector's summary of a run: calls and peaks).
class ReportBuilder : public Pass {
 public:
  using SiteKey = std::function<uint64_t(uint64_t stack_id)>;
  explicit ReportBuilder(size_t top_sites = 10, SiteKey site_key = nullptr, Layer layer = Layer::kReserved)
      : top_sites_(top_sites), site_key_(std::move(site_key)), layer_(layer) {}
  void add(const ReplayStep& step);
  void on_event(const Event&, const ReplayStep& step, const Replay&) override { add(step); }
  // Fills the event-derived parts of REPORT (calls, devices, peaks, sites).
  void finish(ProcessReport& report);

  // FN(device, key, bytes, stack_id) for every site with memory live now.
  template <typename Fn>
  void for_each_live_site(Fn&& fn) const {
    for (const auto& [device, d] : devices_)
      for (size_t slot = 0; slot < d.sites.size(); ++slot)
        if (d.sites[slot].bytes) fn(device, keys_[slot], d.sites[slot].bytes, d.sites[slot].stack_id);
  }
  // Whether the last add() made a new peak on some device.
  bool new_peak() const { return new_peak_; }
  // What is live now by site, largest first (top_sites at most): on DEVICE, or on all devices
  // together.
  std::vector<SiteTotal> live_sites(std::optional<int32_t> device = std::nullopt) const;

 private:
  struct SiteLive {
    uint64_t bytes = 0;
    uint64_t count = 0;
    uint64_t stack_id = 0;  // the stack of its newest allocation, to show
  };
  using SiteMap = std::vector<SiteLive>;  // by slot
  struct DeviceState {
    uint64_t live = 0;
    uint64_t count = 0;
    uint64_t peak = 0;
    uint64_t peak_time = 0;
    uint32_t peak_tid = 0;
    bool peak_unsaved = false;  // the sites at the newest peak are not in at_peak yet
    SiteMap sites;
    SiteMap at_peak;
    // The device layer: samples, the outside of the newest, and the one the peak goes with.
    uint64_t samples = 0, used_max = 0;
    uint64_t outside_latest = 0, outside_latest_time = 0;
    bool peak_has_outside = false;
    uint64_t outside_at_peak = 0, outside_at_peak_time = 0;
    OutsideParts parts_latest, parts_at_peak;
    uint64_t nvml_process_most = 0;  // the most NVML reported this process used (device.process_used)
  };
  void sample_device(int32_t device, uint64_t used, uint64_t t_ns);
  std::vector<SiteTotal> largest(const SiteMap& sites) const;
  // Sites are numbered in order of appearance; a stack id remembers its site's slot, so the key
  // function and the key's hash run once per stack, not once per event.
  // Inline where the answer is cached (every event pays for the call otherwise); the rest apart.
  uint32_t slot_of(Api api, uint64_t stack_id) {
    if (stack_id < by_stack_.size()) {
      const StackSlots& c = by_stack_[stack_id];
      if (c.slot[0] && c.api[0] == api) return c.slot[0] - 1;
      if (c.slot[1] && c.api[1] == api) return c.slot[1] - 1;
    }
    return new_slot_of(api, stack_id);
  }
  uint32_t new_slot_of(Api api, uint64_t stack_id);
  DeviceState& device_state(int32_t device) {
    return device == cached_device_ && cached_state_ ? *cached_state_ : new_device_state(device);
  }
  DeviceState& new_device_state(int32_t device);

  size_t top_sites_;
  SiteKey site_key_;
  Layer layer_;
  std::unordered_map<Site, uint32_t, SiteHash> slots_;
  std::vector<Site> keys_;  // by slot
  // Stack id -> the slots (plus one; 0: none yet) of the two APIs it was last seen with: one
  // stack often serves two (an allocator calling cudaMalloc and cudaMallocAsync from one place).
  struct StackSlots {
    uint32_t slot[2] = {0, 0};
    Api api[2] = {Api::kUnknown, Api::kUnknown};
  };
  std::vector<StackSlots> by_stack_;
  std::array<ApiCounts, static_cast<size_t>(Api::kCount)> calls_{};
  std::vector<OomEvent> oom_events_;
  std::map<int32_t, DeviceState> devices_;
  struct Sample {
    uint64_t used = 0, t_ns = 0;
  };
  std::map<int32_t, Sample> first_samples_;  // every device's, even one nothing was reserved on yet
  struct Known {
    uint64_t bytes = 0, count = 0;
  };
  std::map<int32_t, Known> before_recording_;
  int32_t cached_device_ = INT32_MIN;
  DeviceState* cached_state_ = nullptr;
  uint64_t pinned_host_live_ = 0;
  uint64_t pinned_host_peak_ = 0;
  uint64_t unmatched_frees_ = 0;
  uint64_t captured_events_ = 0;
  uint64_t cupti_events_ = 0;
  uint64_t activity_records_ = 0;
  uint64_t events_ = 0;
  bool new_peak_ = false;
};

}  // namespace memtrace
