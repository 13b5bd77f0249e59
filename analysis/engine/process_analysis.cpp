#include "memtrace/engine/process_analysis.h"

#include <algorithm>
#include <climits>
#include <filesystem>
#include <map>
#include <optional>
#include <system_error>

#include "memtrace/engine/analysis_passes.h"
#include "memtrace/engine/pass.h"
#include "memtrace/engine/trace_set.h"
#include "memtrace/format/run_folder.h"

namespace memtrace {

namespace fs = std::filesystem;

namespace {

void resolve_devices(std::vector<DeviceReport>& devices, const TraceReader& reader, const StackView& stacks,
                     const PhaseTracker& phases, SiteGrouping labels) {
  for (DeviceReport& d : devices) {
    for (const pb::Device& known : reader.header().devices()) {
      if (known.ordinal() != d.device) continue;
      d.name = known.name();
      d.total_bytes = known.total_bytes();
      d.uuid = known.uuid();
    }
    for (auto* sites : {&d.peak_sites, &d.exit_sites}) resolve_sites(*sites, stacks, labels);
    d.peak_step = phases.step_at(d.peak_time_ns);
    d.peak_phase = phases.phase_at(d.peak_time_ns, d.peak_tid);
  }
  std::sort(devices.begin(), devices.end(),
            [](const DeviceReport& a, const DeviceReport& b) { return a.device < b.device; });
}

// What the process did as a whole: its calls, whether PyTorch described an allocated layer, when
// memory first and last changed.
class ProcessFacts : public Pass {
 public:
  ProcessFacts(ProcessAnalysis& out) : out_(out) {}
  void on_event(const Event& event, const ReplayStep& step, const Replay&) override {
    if (!is_observation(event.api)) ++out_.report.events;
    if (event.layer == Layer::kAllocated && event.op() != Op::kMark) out_.has_allocated = true;
    out_.pytorch |= from_pytorch(event.api);
    out_.expandable_segments |= event.api == Api::kTorchSegmentMap;
    if (event.op() == Op::kAlloc && event.ok() && !is_observation(event.api) && !step.memory_changes.empty())
      out_.last_alloc_ns = event.t_ns;
    if (!step.memory_changes.empty()) {
      if (!changed_) out_.first_change_ns = event.t_ns;
      changed_ = true;
      out_.last_change_ns = event.t_ns;
    }
  }

 private:
  ProcessAnalysis& out_;
  bool changed_ = false;
};

// The free space in the allocators' heaps: at each device's peak of the reserved layer, at each
// out-of-memory, and (for the timeline) over time.
class FragmentationPass : public Pass {
 public:
  FragmentationPass(const ReportBuilder& reserved, bool timeline, ProcessAnalysis& out)
      : reserved_(reserved), timeline_(timeline), out_(out) {}

  void on_event(const Event& event, const ReplayStep& step, const Replay& replay) override {
    if (timeline_ && event.t_ns != instant_ns_) {
      flush_instant();
      instant_ns_ = event.t_ns;
    }
    if (event.layer == Layer::kAllocated) {
      heaps_.add(event, step, replay);
      if (timeline_ && step.device >= 0) instant_free_[step.device] = heaps_.free_space(step.device).free_bytes;
    }
    if (!heaps_.any_heaps()) return;
    if (reserved_.new_peak()) {
      at_peak_[step.device] = point("peak", event.t_ns, step.device, replay);
      peak_awaiting_heap_ = step.device;
    } else if (event.kind == MemKind::kHeap && event.op() == Op::kAlloc && peak_awaiting_heap_ == step.device) {
      at_peak_[step.device] = point("peak", at_peak_[step.device].t_ns, step.device, replay);
      peak_awaiting_heap_ = kNoDevice;
    } else {
      if (!step.memory_changes.empty() || event.kind == MemKind::kHeap)
        peak_awaiting_heap_ = kNoDevice;  // memory moved on (mapping a handle moves none)
      // The peak is a moment: everything at its time counts, in whatever order it was written
      // (a snapshot's import puts what was live before its history, segments then blocks, at 0).
      auto at = at_peak_.find(step.device);
      if (at != at_peak_.end() && event.t_ns == at->second.t_ns &&
          replay.live_bytes(Layer::kReserved, step.device) == at->second.reserved_bytes)
        at->second = point("peak", event.t_ns, step.device, replay);
    }
    if (event.result == kOutOfMemoryResult && event.op() == Op::kAlloc) {
      FragmentationPoint p = point("oom", event.t_ns, event.device, replay);
      p.request_bytes = event.size;
      out_.fragmentation.push_back(p);
    }
  }

  void finish(uint64_t end_ns) override {
    flush_instant();
    out_.has_heaps = heaps_.any_heaps();
    for (auto& [device, p] : at_peak_) out_.fragmentation.insert(out_.fragmentation.begin(), p);
    std::stable_sort(out_.fragmentation.begin(), out_.fragmentation.end(),
                     [](const FragmentationPoint& a, const FragmentationPoint& b) { return a.t_ns < b.t_ns; });
    if (timeline_) out_.free_in_heaps = free_in_heaps_.series(end_ns);
  }

 private:
  // An allocator describes the segment it just reserved right after reserving it (cudaMalloc,
  // then PyTorch's segment_alloc): a peak's free space counts that segment too.
  static constexpr int32_t kNoDevice = INT32_MIN;

  FragmentationPoint point(const char* when, uint64_t t, int32_t device, const Replay& replay) const {
    FragmentationPoint p;
    p.when = when;
    p.t_ns = t;
    p.device = device;
    p.reserved_bytes = replay.live_bytes(Layer::kReserved, device);
    p.allocated_bytes = replay.live_bytes(Layer::kAllocated, device);
    p.space = heaps_.free_space(device);
    return p;
  }

  // The free space over time is what each moment ends with: events at one time stamp are one
  // moment (a snapshot's import places a segment, then its blocks, both at its start).
  void flush_instant() {
    for (const auto& [device, free] : instant_free_)
      free_in_heaps_.record(device, Layer::kAllocated, instant_ns_, free);
    instant_free_.clear();
  }

  const ReportBuilder& reserved_;
  const bool timeline_;
  ProcessAnalysis& out_;
  FragmentationTracker heaps_;
  Timeline free_in_heaps_;
  uint64_t instant_ns_ = 0;
  std::map<int32_t, uint64_t> instant_free_;
  std::map<int32_t, FragmentationPoint> at_peak_;
  int32_t peak_awaiting_heap_ = kNoDevice;
};

// Memory on each device and layer over time, and the device layer's samples.
class TimelinePass : public Pass {
 public:
  explicit TimelinePass(ProcessAnalysis& out) : out_(out) {}
  void on_event(const Event& event, const ReplayStep& step, const Replay& replay) override {
    if (event.api == Api::kDeviceUsed && event.device >= 0) {
      device_used_.record(event.device, Layer::kDevice, event.t_ns, event.size);
      out_.last_device_sample_ns = event.t_ns;
    }
    for (const MemoryChange& c : step.memory_changes)
      timeline_.record(c.device, c.layer, event.t_ns, replay.live_bytes(c.layer, c.device));
  }
  void finish(uint64_t end_ns) override {
    out_.timeline = timeline_.series(end_ns);
    out_.device_used = device_used_.series(end_ns);
    out_.timeline_bucket_ns = timeline_.bucket_ns();
  }

 private:
  ProcessAnalysis& out_;
  Timeline timeline_, device_used_;
};

}  // namespace

bool analyze_process(const std::string& path, const AnalysisOptions& options, ProcessAnalysis& out,
                     std::string& error) {
  std::unique_ptr<TraceReader> reader = open_trace(path, error);
  if (!reader) return false;
  reader->prefetch();  // one core reads and unpacks chunks while this one analyzes
  out = ProcessAnalysis();
  ProcessReport& report = out.report;
  const pb::TraceHeader& h = reader->header();
  report.pid = h.pid();
  report.command.assign(h.command().begin(), h.command().end());
  report.host = h.host();
  report.origin_unix_ns = h.origin_unix_ns();
  if (h.has_rank()) report.rank = h.rank();
  if (h.has_local_rank()) report.local_rank = h.local_rank();
  if (h.has_world_size()) report.world_size = h.world_size();
  report.imported_from = h.imported_from();
  if (h.recording() == pb::TraceHeader::ATTACHED) report.joined_by = "memtrace attach";
  if (h.recording() == pb::TraceHeader::IN_PROCESS) report.joined_by = "memtrace.record";
  report.trace_path = path;

  StackView stacks(*reader, options.keep_cuda_frames);
  const SiteGrouping labels = options.labels.value_or(options.grouping);
  auto site_key = [&](uint64_t stack_id) {
    // Sites named as the default groups them (the HTML page's, grouped by stack) need every
    // stack's callers seen: a helper's name says its caller when it has several.
    if (labels == SiteGrouping::kUser && options.grouping != SiteGrouping::kUser)
      stacks.site_key(stack_id, SiteGrouping::kUser);
    return stacks.site_key(stack_id, options.grouping);
  };
  ReportBuilder reserved(options.top_sites, site_key, Layer::kReserved);
  ReportBuilder allocated(options.top_sites, site_key, Layer::kAllocated);
  PhaseTracker phases(*reader, options.step_pattern);
  GrowthTracker growth;
  CategoryTracker categories;
  TorchCounterTracker torch_counters;
  LargestAllocations largest(options.largest_allocations);

  // The passes, in the order each event reaches them (categories read the step count before the
  // event's own mark moves it; fragmentation reads the reserved layer's new peak).
  ProcessFacts facts(out);
  FunctionPass category_pass(
      [&](const Event& event, const ReplayStep& step, const Replay& replay) {
        if (event.layer == Layer::kAllocated || event.api == Api::kShimRangePush || event.api == Api::kShimRangePop) {
          // Without the blocks' categories, their marks still say whether categories are known.
          if (!options.categories && event.op() != Op::kMark) return;
          bool named = api_info(event.api).aux == AuxField::kName;
          categories.add(event, step, replay, phases.step_starts().size(),
                         named ? reader->string(event.name) : std::string_view());
        }
      },
      kAllocatedLayerEvents | kMarkEvents);
  FunctionPass torch_counter_pass(
      [&](const Event& event, const ReplayStep& step, const Replay&) {
        if (event.layer == Layer::kAllocated || event.api == Api::kTorchCounter)
          torch_counters.add(event, step, event.api == Api::kTorchCounter ? reader->string(event.name) : "");
      },
      kAllocatedLayerEvents | kMarkEvents);
  FunctionPass allocated_layer(
      [&](const Event& event, const ReplayStep& step, const Replay&) {
        if (event.layer == Layer::kAllocated) allocated.add(step);
      },
      kAllocatedLayerEvents);
  FragmentationPass fragmentation(reserved, options.timeline, out);
  // Steps and phases, and each step's live bytes by site for growth.
  FunctionPass phase_pass(
      [&](const Event& event, const ReplayStep&, const Replay&) {
        if (event.layer == Layer::kAllocated || event.op() != Op::kMark) return;
        size_t steps = phases.step_starts().size();
        phases.add(event);
        if (phases.step_starts().size() == steps) return;
        growth.boundary([&](auto visit) {
          reserved.for_each_live_site([&](int32_t device, const Site& key, uint64_t bytes, uint64_t stack_id) {
            visit(device, Layer::kReserved, key, bytes, stack_id);
          });
          allocated.for_each_live_site([&](int32_t device, const Site& key, uint64_t bytes, uint64_t stack_id) {
            visit(device, Layer::kAllocated, key, bytes, stack_id);
          });
        });
      },
      kMarkEvents);
  FunctionPass largest_pass(
      [&](const Event& event, const ReplayStep& step, const Replay&) {
        if (!step.memory_changes.empty()) largest.add(event, step);
      },
      kCallEvents | kAllocatedLayerEvents);
  TimelinePass timeline(out);
  OwnerTracker owners(stacks, !report.imported_from.empty(),
                      options.timeline && options.grouping == SiteGrouping::kOwner);  // timeline --by owner

  std::vector<std::unique_ptr<AnalysisPass>> analyses = make_analysis_passes(options);

  PassDriver driver;
  driver.add(facts).add(reserved).add(category_pass).add(torch_counter_pass).add(allocated_layer);
  if (options.fragmentation) driver.add(fragmentation);
  driver.add(phase_pass);
  if (options.largest_allocations) driver.add(largest_pass);
  if (options.timeline) driver.add(timeline);
  if (options.owners) driver.add(owners);
  for (auto& analysis : analyses) driver.add(*analysis);
  report.end_time_ns = driver.run(*reader);
  for (auto& analysis : analyses) analysis->report(out);

  reserved.finish(report);
  report.problem = reader->problem();
  report.complete = reader->footer().has_value();
  if (const auto& footer = reader->footer()) {
    if (footer->has_exit_status()) report.exit_status = footer->exit_status();
    report.end_reason = footer->end_reason();
    report.dropped_events = footer->dropped_events();
    report.longest_wait_ns = footer->longest_wait_ns();
    report.notices.assign(footer->notices().begin(), footer->notices().end());
    report.incomplete_records = footer->incomplete_records();
  }
  phases.finish(report.end_time_ns);
  resolve_devices(report.devices, *reader, stacks, phases, labels);
  if (out.has_allocated) {
    allocated.finish(out.allocated);
    resolve_devices(out.allocated.devices, *reader, stacks, phases, labels);
    categories.finish();
    out.categories_known = categories.known();
    for (DeviceReport& d : out.allocated.devices) d.peak_categories = categories.at_peak(d.device);
  }
  if (options.owners) {
    for (DeviceReport& d : report.devices) d.owners_at_peak = owners.at_peak(d, out.pytorch);
    out.owner_timeline = owners.timeline();
    std::vector<std::vector<OwnerShare>> at_ooms = owners.at_ooms(out.pytorch);
    if (at_ooms.size() == report.oom_events.size())
      for (size_t i = 0; i < at_ooms.size(); ++i) report.oom_events[i].owners = std::move(at_ooms[i]);
  }
  report.snapshots = run_folder::snapshots_of(path, report.pid);
  report.pytorch_counters = torch_counters.finish();

  out.step_starts = phases.step_starts();
  out.step_pattern = options.step_pattern;
  out.ranges = phases.ranges();
  out.ranges_dropped = phases.ranges_dropped();
  out.step_boundaries = growth.boundaries();
  // With PyTorch's tensors recorded, growth is what the program allocates there: its caching
  // allocator keeps and grows its reserved segments by design.
  for (SiteGrowth& g : growth.growing())
    (out.pytorch && g.layer != Layer::kAllocated ? out.reserved_growth : out.growth).push_back(std::move(g));
  for (auto* list : {&out.growth, &out.reserved_growth}) {
    for (SiteGrowth& g : *list) resolve_site(g, g.site.stack_id, stacks, labels);
    distinguish_sites(*list);
  }
  if (options.largest_allocations) {
    out.largest = largest.spans();
    out.allocations_seen = largest.seen();
    auto show = [&](uint64_t stack_id) {
      if (auto [it, fresh] = out.stacks.try_emplace(stack_id); fresh) {
        resolve_site(it->second, stack_id, stacks, labels);
        it->second.user_group = stacks.site_key(stack_id, SiteGrouping::kUser);
      }
    };
    for (const AllocationSpan& a : out.largest) show(a.stack_id);
    for (const auto* layer : {&report, &out.allocated})
      for (const DeviceReport& d : layer->devices)
        for (const auto* sites : {&d.peak_sites, &d.exit_sites})
          for (const SiteTotal& site : *sites) show(site.site.stack_id);
  }
  return true;
}

}  // namespace memtrace
