#include "memtrace/engine/process_analysis.h"

#include <algorithm>
#include <climits>
#include <filesystem>
#include <map>
#include <optional>
#include <system_error>

#include "memtrace/engine/trace_set.h"

namespace memtrace {

namespace fs = std::filesystem;

namespace {

// Snapshots beside the trace: <reason>-<pid>[-<n>].memsnap.
std::vector<std::string> snapshots_of(const std::string& trace, int32_t pid) {
  std::vector<std::string> out;
  std::error_code ec;
  fs::path folder = fs::path(trace).parent_path();
  if (folder.empty()) folder = ".";
  const std::string tag = "-" + std::to_string(pid);
  for (const auto& entry : fs::directory_iterator(folder, ec)) {
    std::string name = entry.path().filename().string();
    size_t at = name.find(tag);
    if (entry.path().extension() != ".memsnap" || at == std::string::npos) continue;
    char after = name[at + tag.size()];
    if (after == '-' || after == '.') out.push_back(entry.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

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
  if (h.has_rank()) report.rank = h.rank();
  if (h.has_local_rank()) report.local_rank = h.local_rank();
  if (h.has_world_size()) report.world_size = h.world_size();
  report.imported_from = h.imported_from();
  report.trace_path = path;

  Replay replay;
  StackView stacks(*reader, options.keep_cuda_frames);
  auto site_key = [&](uint64_t stack_id) { return stacks.site_key(stack_id, options.grouping); };
  ReportBuilder reserved(options.top_sites, site_key, Layer::kReserved);
  ReportBuilder allocated(options.top_sites, site_key, Layer::kAllocated);
  PhaseTracker phases(*reader, options.step_pattern);
  GrowthTracker growth;
  FragmentationTracker heaps;
  CategoryTracker categories;
  TorchCounterTracker torch_counters;
  Timeline timeline, free_in_heaps, device_used;
  LargestAllocations largest(options.largest_allocations);
  const SiteGrouping labels = options.labels.value_or(options.grouping);
  std::map<int32_t, FragmentationPoint> at_peak;
  // An allocator describes the segment it just reserved right after reserving it (cudaMalloc,
  // then PyTorch's segment_alloc): a peak's free space counts that segment too.
  constexpr int32_t kNoDevice = INT32_MIN;
  int32_t peak_awaiting_heap = kNoDevice;

  auto fragmentation_point = [&](const char* when, uint64_t t, int32_t device) {
    FragmentationPoint p;
    p.when = when;
    p.t_ns = t;
    p.device = device;
    p.reserved_bytes = replay.live_bytes(Layer::kReserved, device);
    p.allocated_bytes = replay.live_bytes(Layer::kAllocated, device);
    p.space = heaps.free_space(device);
    return p;
  };
  auto boundary = [&](auto visit) {
    reserved.for_each_live_site([&](int32_t device, const Site& key, uint64_t bytes, uint64_t stack_id) {
      visit(device, Layer::kReserved, key, bytes, stack_id);
    });
    allocated.for_each_live_site([&](int32_t device, const Site& key, uint64_t bytes, uint64_t stack_id) {
      visit(device, Layer::kAllocated, key, bytes, stack_id);
    });
  };

  Event event;
  uint64_t last_t = 0;
  bool changed = false;
  while (reader->next(event)) {
    if (!is_observation(event.api)) ++report.events;
    last_t = event.t_ns;
    const ReplayStep& step = replay.apply(event);
    reserved.add(step);
    if (event.layer == Layer::kAllocated || event.api == Api::kShimRangePush || event.api == Api::kShimRangePop) {
      bool named = api_info(event.api).aux == AuxField::kName;
      categories.add(event, step, replay, phases.step_starts().size(),
                     named ? reader->string(event.name) : std::string_view());
    }
    if (event.layer == Layer::kAllocated && event.op() != Op::kMark) out.has_allocated = true;
    if (event.layer == Layer::kAllocated || event.api == Api::kTorchCounter)
      torch_counters.add(event, step, event.api == Api::kTorchCounter ? reader->string(event.name) : "");
    out.pytorch |= from_pytorch(event.api);
    if (event.layer == Layer::kAllocated) {
      allocated.add(step);
      heaps.add(event, step, replay);
      if (options.timeline && step.device >= 0)
        free_in_heaps.record(step.device, Layer::kAllocated, event.t_ns, heaps.free_space(step.device).free_bytes);
    } else if (event.op() == Op::kMark) {
      size_t steps = phases.step_starts().size();
      phases.add(event);
      if (phases.step_starts().size() != steps) growth.boundary(boundary);
    }
    if (heaps.any_heaps()) {
      if (reserved.new_peak()) {
        at_peak[step.device] = fragmentation_point("peak", event.t_ns, step.device);
        peak_awaiting_heap = step.device;
      } else if (event.kind == MemKind::kHeap && event.op() == Op::kAlloc && peak_awaiting_heap == step.device) {
        at_peak[step.device] = fragmentation_point("peak", at_peak[step.device].t_ns, step.device);
        peak_awaiting_heap = kNoDevice;
      } else if (!step.memory_changes.empty() || event.kind == MemKind::kHeap) {
        peak_awaiting_heap = kNoDevice;  // memory moved on (mapping a handle moves none)
      }
      if (event.result == kOutOfMemoryResult && event.op() == Op::kAlloc) {
        FragmentationPoint p = fragmentation_point("oom", event.t_ns, event.device);
        p.request_bytes = event.size;
        out.fragmentation.push_back(p);
      }
    }
    if (!step.memory_changes.empty()) {
      if (!changed) out.first_change_ns = event.t_ns;
      changed = true;
      out.last_change_ns = event.t_ns;
    }
    if (options.largest_allocations && !step.memory_changes.empty()) largest.add(event, step);
    if (options.timeline && event.api == Api::kDeviceUsed && event.device >= 0)
      device_used.record(event.device, Layer::kDevice, event.t_ns, event.size);
    if (options.timeline)
      for (const MemoryChange& c : step.memory_changes)
        timeline.record(c.device, c.layer, event.t_ns, replay.live_bytes(c.layer, c.device));
  }
  reserved.finish(report);
  report.end_time_ns = last_t;
  report.problem = reader->problem();
  report.complete = reader->footer().has_value();
  if (const auto& footer = reader->footer()) {
    if (footer->has_exit_status()) report.exit_status = footer->exit_status();
    report.end_reason = footer->end_reason();
    report.dropped_events = footer->dropped_events();
    report.longest_wait_ns = footer->longest_wait_ns();
    report.notices.assign(footer->notices().begin(), footer->notices().end());
    report.incomplete_records = footer->incomplete_records();
    report.end_time_ns = std::max(report.end_time_ns, footer->end_ns());
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
  report.snapshots = snapshots_of(path, report.pid);
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
  out.has_heaps = heaps.any_heaps();
  for (auto& [device, p] : at_peak) out.fragmentation.insert(out.fragmentation.begin(), p);
  std::stable_sort(out.fragmentation.begin(), out.fragmentation.end(),
                   [](const FragmentationPoint& a, const FragmentationPoint& b) { return a.t_ns < b.t_ns; });
  if (options.largest_allocations) {
    out.largest = largest.spans();
    out.allocations_seen = largest.seen();
    auto show = [&](uint64_t stack_id) {
      if (auto [it, fresh] = out.stacks.try_emplace(stack_id); fresh)
        resolve_site(it->second, stack_id, stacks, labels);
    };
    for (const AllocationSpan& a : out.largest) show(a.stack_id);
    for (const auto* layer : {&report, &out.allocated})
      for (const DeviceReport& d : layer->devices)
        for (const auto* sites : {&d.peak_sites, &d.exit_sites})
          for (const SiteTotal& site : *sites) show(site.site.stack_id);
  }
  if (options.timeline) {
    out.timeline = timeline.series(report.end_time_ns);
    out.free_in_heaps = free_in_heaps.series(report.end_time_ns);
    out.device_used = device_used.series(report.end_time_ns);
    out.timeline_bucket_ns = timeline.bucket_ns();
  }
  return true;
}

}  // namespace memtrace
