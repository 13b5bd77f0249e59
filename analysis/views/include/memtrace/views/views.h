// What `memtrace report`, `peak`, `leaks`, `frag`, `diff`, `check` and `timeline` show: for each,
// one struct made from the analyses of one or more processes, and both its JSON document (the
// contract of --json: fields are added, never removed) and its text for the terminal made from that
// struct. `snapshot` (snapshot_view.h), `verify` (verify.h) and `explain` (estimate/explain.h) have
// the same shape.
#pragma once

#include <array>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "memtrace/engine/process_analysis.h"
#include "memtrace/views/report_render.h"

namespace memtrace {

// memtrace report: per process, its calls by API, per device the peak, when, what was live at
// exit, and the largest sites at the peak.
struct ReportView {
  std::vector<ProcessReport> processes;
};
ReportView report_view(std::vector<ProcessAnalysis>&& processes);
nlohmann::json to_json(const ReportView& view);
std::string to_text(const ReportView& view);

// memtrace peak: per process and device, the peak of one layer and what was live then.
struct PeakOptions {
  Layer layer = Layer::kReserved;  // or kAllocated, kDevice
  std::optional<int32_t> device;   // all devices when unset
  bool by_category = false;        // what was live by category (the allocated layer), not by site
  bool by_owner = false;           // who held the device at the reserved peak (owners_at_peak)
};
struct PeakView {
  struct Device {
    DeviceReport report;                            // its peak, when, and the sites then
    std::optional<uint64_t> step;                   // the step it fell in, when the run had steps
    std::optional<TorchCounters> pytorch_counters;  // PyTorch's own, at exit
  };
  struct Process {
    ProcessId id;
    size_t steps = 0;
    bool layer_recorded = true;  // false: the allocated layer was asked for and never described
    bool categories_known = false;
    bool pytorch = false;  // PyTorch described the allocated layer: requested bytes
    std::vector<Device> devices;
  };
  struct AllProcesses {  // with several processes (ranks of one job)
    uint64_t sum_of_peaks = 0, largest_peak = 0;
    double mean_peak = 0, imbalance = 1;
  };
  Layer layer = Layer::kReserved;
  bool by_category = false;
  bool by_owner = false;
  std::vector<Process> processes;
  std::optional<AllProcesses> all;
};
PeakView peak_view(const std::vector<ProcessAnalysis>& processes, const PeakOptions& options);
nlohmann::json to_json(const PeakView& view);
std::string to_text(const PeakView& view);

// memtrace leaks: what was live at the end by site, kept or growing, and the growth per step.
struct LeaksView {
  // What a site live at exit is: growing step by step, allocated and kept, or, without the steps
  // to tell them apart, only live.
  enum class Kind { kLive, kKept, kGrowing };
  struct Site {
    SiteTotal site;
    Kind kind = Kind::kLive;
  };
  struct Device {
    int32_t device = -1;
    uint64_t live_bytes = 0, live_count = 0;
    std::vector<Site> sites;
  };
  struct Process {
    ProcessId id;
    Layer layer = Layer::kReserved;  // whose live memory: the allocated layer's when recorded
    bool complete = true;
    size_t steps = 0;
    std::string step_pattern;
    std::string growth_unmeasured;  // why growth could not be told from memory kept; empty when it could
    std::vector<Device> devices;
    std::vector<SiteGrowth> growth;
  };
  std::vector<Process> processes;
  uint64_t live_at_exit_bytes = 0;
};
LeaksView leaks_view(const std::vector<ProcessAnalysis>& processes);
nlohmann::json to_json(const LeaksView& view);
std::string to_text(const LeaksView& view);

// memtrace frag: free space inside the allocator's heaps at the peaks and out-of-memories, and
// reserved minus allocated over time.
struct FragView {
  struct Point {
    FragmentationPoint point;
    std::string advice;  // what would help, when fragmentation is the problem
  };
  struct FreeInHeaps {  // per device, over time: (t_ns, the most free inside the heaps then)
    int32_t device = -1;
    std::vector<std::array<uint64_t, 2>> points;
  };
  struct Process {
    ProcessId id;
    bool layers_known = false;
    std::vector<Point> points;
    std::vector<FreeInHeaps> free_in_heaps;
    uint64_t last_alloc_ns = 0;  // after it the program only freed: free space then asks nothing
    // For PyTorch's allocator, one sentence: would PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
    // help? Empty for other allocators.
    std::string expandable_segments;
  };
  std::vector<Process> processes;
};
// The answer FragView::Process::expandable_segments gives for P.
std::string expandable_segments_answer(const ProcessAnalysis& p);
FragView frag_view(const std::vector<ProcessAnalysis>& processes);
nlohmann::json to_json(const FragView& view);
std::string to_text(const FragView& view);

// memtrace diff: two runs compared. Sites are matched by API and location, or by their whole
// stack when grouped by stack.
struct DiffView {
  struct Change {
    uint64_t base = 0, next = 0;
    int64_t change() const { return static_cast<int64_t>(next) - static_cast<int64_t>(base); }
    double percent() const;
  };
  struct DevicePeak {
    int32_t device = -1;
    Change peak;
  };
  struct SiteChange {
    Change bytes;
    std::string api, location;
    std::vector<FrameView> stack;
    size_t named_frame = 0;  // the frame of STACK that LOCATION names
  };
  std::vector<DevicePeak> peaks;
  Change live_at_exit, growth_per_step;
  std::string growth_unmeasured;  // why growth per step is not compared (a side without steps); empty when it is
  std::vector<SiteChange> sites;  // at the peak, largest growth first
  // With --by owner: who held the devices at their peaks (summed over processes and devices),
  // largest growth first.
  struct OwnerChange {
    Change bytes;
    std::string owner;
  };
  std::vector<OwnerChange> owners;
  std::vector<std::string> summary;  // what changed, in words, most important first
};
DiffView diff_view(const std::vector<ProcessAnalysis>& base, const std::vector<ProcessAnalysis>& next,
                   SiteGrouping grouping);
nlohmann::json to_json(const DiffView& view);
std::string to_text(const DiffView& view);

// memtrace check: each limit given, held against the run.
struct CheckLimits {
  std::optional<uint64_t> max_peak, max_leaked, max_growth_per_step;
  std::optional<double> max_regression_percent;  // with a baseline
  SiteGrouping grouping = SiteGrouping::kUser;   // how sites are matched against the baseline
};
struct CheckResult {
  struct Site {
    uint64_t bytes = 0;
    std::string api, location;
  };
  struct Limit {
    std::string name;  // max-peak, max-leaked, max-growth-per-step, max-regression
    // Bytes, except max-regression's, which are percents.
    uint64_t limit_bytes = 0, actual_bytes = 0;
    double limit_percent = 0, actual_percent = 0;
    bool in_percent() const { return name == "max-regression"; }
    bool passed = true;
    std::string unmeasured;  // why the run gives nothing to hold against the limit: it does not pass
    std::string detail;      // what the figures compare, when there is more to say
    // The largest, to look at when it is broken; max-regression's are what grew against the
    // baseline, by how much.
    std::vector<Site> sites;
  };
  std::vector<Limit> limits;
  bool passed = true;    // every limit measured and held
  bool measured = true;  // every limit could be measured (exit 2 when not)
};
CheckResult check(const std::vector<ProcessAnalysis>& processes, const CheckLimits& limits,
                  const std::vector<ProcessAnalysis>* baseline);
nlohmann::json to_json(const CheckResult& result);
std::string to_text(const CheckResult& result);
std::string check_junit(const CheckResult& result);

// The part of a run a timeline shows: from and to a time since the program started, or a step's
// start (from) or end (to). Unset: where memory first and last changed.
struct TimeBound {
  std::optional<uint64_t> t_ns;
  std::optional<uint64_t> step;
};
struct TimeWindow {
  TimeBound from, to;
};
// "120ms", "1.5s", "step:3"; nullopt for anything else.
std::optional<TimeBound> parse_time_bound(const std::string& text);

// memtrace timeline: memory over time per process, device and layer, over a window; as a terminal
// chart WIDTH columns wide, JSON, CSV, or a standalone SVG with phases shaded and steps drawn.
struct TimelineView {
  struct Series {
    int32_t device = -1;
    Layer layer = Layer::kReserved;
    std::string name;                   // "pid P device D layer" ("snapshot FILE ...", "rank R ...")
    std::string owner;                  // timeline --by owner: whose reserved bytes
    uint64_t before = 0;                // what it held when the window opens
    std::vector<TimelinePoint> points;  // the buckets that overlap the window
  };
  struct Process {
    ProcessId id;
    uint64_t bucket_ns = 0, end_ns = 0;
    uint64_t from_ns = 0, to_ns = 0;  // the window, in its own times
    std::vector<uint64_t> step_starts;
    std::vector<PhaseRange> ranges;
    std::vector<Series> series;
  };
  std::vector<Process> processes;
};
// BY_OWNER: each owner's reserved bytes (ProcessAnalysis::owner_timeline), not the layers.
TimelineView timeline_view(const std::vector<ProcessAnalysis>& processes, const TimeWindow& window,
                           bool by_owner = false);
nlohmann::json to_json(const TimelineView& view);
std::string to_text(const TimelineView& view, size_t width);
std::string to_csv(const TimelineView& view);
std::string to_svg(const TimelineView& view);

}  // namespace memtrace
