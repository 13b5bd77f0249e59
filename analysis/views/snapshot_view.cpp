#include "memtrace/views/snapshot_view.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "memtrace.pb.h"
#include "memtrace/base/units.h"
#include "memtrace/engine/trace_set.h"
#include "memtrace/format/run_folder.h"
#include "memtrace/views/report_render.h"

namespace memtrace {

namespace fs = std::filesystem;

namespace {

std::string reason_name(pb::Snapshot::Reason reason) {
  switch (reason) {
    case pb::Snapshot::OOM: return "oom";
    case pb::Snapshot::DEMAND: return "demand";
    case pb::Snapshot::PERIODIC: return "periodic";
    case pb::Snapshot::PEAK: return "peak";
    default: return "unknown";
  }
}

std::string percent(uint64_t part, uint64_t whole) {
  char text[16];
  std::snprintf(text, sizeof text, "%.0f%%",
                whole ? 100.0 * static_cast<double>(part) / static_cast<double>(whole) : 0.0);
  return text;
}

std::string diagnose(const SnapshotReport& s) {
  std::string top;
  uint64_t shown = s.allocated_known ? s.allocated_bytes : s.live_bytes;
  if (!s.sites.empty()) top = "; " + percent(s.sites[0].bytes, shown) + " from " + s.sites[0].location;
  std::string live = format_bytes(s.live_bytes) + " live in " + counted(s.live_count, "allocation");
  if (s.allocated_known)
    live = format_bytes(s.live_bytes) + " reserved, " + format_bytes(s.allocated_bytes) + " of it allocated to " +
           counted(s.allocated_count, "tensor");
  if (!s.imported_from.empty() && s.reason != "oom")
    return s.imported_from + " at " + format_duration_ns(s.time_ns) + " into its trace: " + live + top + ".";
  if (s.reason != "oom") {
    std::string what = s.reason == "peak" ? "at the peak" : s.reason == "demand" ? "on demand" : "periodic";
    return "snapshot " + what + " at " + format_duration_ns(s.time_ns) + ": " + live + top + ".";
  }
  std::string where = s.device >= 0 ? "device " + std::to_string(s.device) : "host memory";
  uint64_t asked = s.request ? s.request->size : 0;
  std::string text = where + " ran out of memory: asked for " + format_bytes(asked);
  if (s.device_total_bytes)
    text += " with " + format_bytes(s.device_free_bytes) + " free of " + format_bytes(s.device_total_bytes);
  text += "; " + live + top + ".";
  if (s.device_total_bytes && s.device_free_bytes >= asked && asked > 0)
    text +=
        " The free memory would have covered the request, but no single free range could: the device's "
        "memory is fragmented.";
  if (s.device_total_bytes) {
    uint64_t used = s.device_total_bytes - s.device_free_bytes;
    if (used > s.live_bytes)
      text += " Of the " + format_bytes(used) + " in use on the device, " + format_bytes(used - s.live_bytes) +
              " was held outside the program's allocations (CUDA context, library workspaces, other processes).";
  }
  if (!s.imported_from.empty())
    ;  // a PyTorch snapshot says nothing of what came after
  else if (s.outcome_known)
    text += s.fatal ? " The process died of it." : s.recovered ? " The process recovered." : "";
  else
    text += " The process was still running.";
  return text;
}

// A PyTorch snapshot is its final state: what was reserved and allocated to tensors then, and the
// out-of-memory it recorded, if any (snapshots are often dumped from PyTorch's OOM observer).
bool read_final_state(const TraceReader& reader, const StackView& stacks, const AnalysisOptions& options,
                      const Replay& replay, const ReportBuilder& tensors, const std::optional<Event>& oom,
                      uint64_t last_t, SnapshotReport& out) {
  out.imported_from = reader.header().imported_from();
  out.problem = reader.problem();
  out.reason = oom ? "oom" : "end";
  out.time_ns = last_t;
  out.live_bytes = replay.reserved_bytes();
  replay.for_each_live([&](uint64_t, const LiveAllocation& a) { out.live_count += counts_as_device_memory(a.kind); });
  out.allocated_known = true;
  for (const auto& [addr, region] : replay.regions()) {
    out.allocated_bytes += region.size;
    ++out.allocated_count;
  }
  if (oom) {
    out.request = oom;
    out.device = oom->device;
    out.device_free_bytes = oom->device_free;
    out.request_stack = stacks.frames(oom->stack_id);
    auto named = stacks.site_frame(oom->stack_id, SiteGrouping::kUser);
    out.request_location = named ? frame_label(*named) : "";
  }
  out.sites = tensors.live_sites();
  resolve_sites(out.sites, stacks, options.grouping);
  out.diagnosis = diagnose(out);
  return true;
}

}  // namespace

bool read_snapshot(const std::string& path, const AnalysisOptions& options, SnapshotReport& out, std::string& error) {
  auto reader = open_trace(path, error);
  if (!reader) return false;
  out = SnapshotReport();
  out.path = path;
  out.pid = reader->header().pid();
  StackView stacks(*reader, options.keep_cuda_frames);

  // The live allocations, grouped by site as every report groups them, on the snapshot's device
  // (all devices together otherwise). A snapshot's events are the allocations live then.
  auto key = [&](uint64_t stack_id) { return stacks.site_key(stack_id, options.grouping); };
  ReportBuilder sites(options.top_sites, key);
  ReportBuilder tensors(options.top_sites, key, Layer::kAllocated);
  std::optional<Event> oom;
  FunctionPass oom_pass([&](const Event& e, const ReplayStep&, const Replay&) {
    if (e.api == Api::kTorchOom) oom = e;
  });
  PassDriver driver;
  driver.add(sites).add(tensors).add(oom_pass).run(*reader);
  const Replay& replay = driver.replay();
  const uint64_t last_t = driver.last_t_ns();
  const std::optional<pb::Snapshot>& info = reader->snapshot();
  if (!info && !reader->header().imported_from().empty())
    return read_final_state(*reader, stacks, options, replay, tensors, oom, last_t, out);
  if (!info) {
    error = path + " is a trace, not a snapshot (use memtrace report)";
    return false;
  }
  out.problem = reader->problem();
  out.reason = reason_name(info->reason());
  out.time_ns = info->time_ns();
  out.device = info->device();
  out.outcome_known = info->outcome_known();
  out.recovered = info->recovered();
  out.fatal = info->fatal();
  out.device_free_bytes = info->device_free_bytes();
  out.device_total_bytes = info->device_total_bytes();
  out.live_bytes = info->reserved_bytes();
  out.live_count = info->reserved_count();
  out.allocated_known = info->allocated_known();
  out.allocated_bytes = info->allocated_bytes();
  for (const auto& [addr, region] : replay.regions())
    if (out.device < 0 || region.device == out.device) ++out.allocated_count;
  out.recent_events = reader->recent_events().size();
  if (reader->snapshot_request()) {
    out.request = reader->snapshot_request();
    out.request_stack = stacks.frames(out.request->stack_id);
    auto named = stacks.site_frame(out.request->stack_id, SiteGrouping::kUser);
    out.request_location = named ? frame_label(*named) : "";
  }
  // With PyTorch's tensors in it, the sites are theirs: what the program itself holds.
  const ReportBuilder& shown = out.allocated_known ? tensors : sites;
  out.sites = shown.live_sites(out.device >= 0 ? std::optional<int32_t>(out.device) : std::nullopt);
  resolve_sites(out.sites, stacks, options.grouping);
  out.diagnosis = diagnose(out);
  return true;
}

nlohmann::json to_json(const SnapshotReport& s) {
  nlohmann::json request = nullptr;
  if (s.request)
    request = {{"api", std::string(api_name(s.request->api))},
               {"size", s.request->size},
               {"stream", s.request->stream},
               {"result", s.request->result},
               {"location", s.request_location},
               {"stack", stack_json(s.request_stack)}};
  nlohmann::json sites = nlohmann::json::array();
  for (const SiteTotal& site : s.sites) sites.push_back(site_json(site));
  nlohmann::json layers = {{"reserved", s.live_bytes},
                           {"allocated", s.allocated_known ? nlohmann::json(s.allocated_bytes) : nlohmann::json()}};
  layers["device"] = s.device_total_bytes ? nlohmann::json(s.device_total_bytes - s.device_free_bytes) : nullptr;
  return {{"pid", s.pid},
          {"device", s.device},
          {"reason", s.reason},
          {"fatal", s.fatal},
          {"recovered", s.recovered},
          {"outcome_known", s.outcome_known},
          {"time_ns", s.time_ns},
          {"request", request},
          {"device_free_bytes", s.device_free_bytes},
          {"device_total_bytes", s.device_total_bytes},
          {"live_bytes", s.live_bytes},
          {"live_count", s.live_count},
          {"layers", layers},
          {"sites", sites},
          {"recent_events", s.recent_events},
          {"diagnosis", s.diagnosis},
          {"imported_from", s.imported_from},
          {"path", s.path}};
}

std::string to_text(const SnapshotReport& s) {
  std::string out =
      s.path + (s.imported_from.empty() ? " (process " + std::to_string(s.pid) + ")" : "") + "\n" + s.diagnosis + "\n";
  if (!s.problem.empty()) out += "WARNING: " + s.problem + "\n";
  if (s.request) {
    out += "\nthe failed request: " + std::string(api_name(s.request->api)) + " of " + format_bytes(s.request->size) +
           (s.request_location.empty() ? "" : " at " + s.request_location) + "\n";
    // From the user's frame outwards (--json has every frame).
    size_t from = 0;
    for (size_t k = 0; k < s.request_stack.size(); ++k)
      if (frame_label(s.request_stack[k]) == s.request_location) {
        from = k;
        break;
      }
    out += stack_text(s.request_stack, from, 4, 12);
  }
  if (!s.sites.empty()) out += "\nlargest sites live then:\n";
  for (const SiteTotal& site : s.sites) {
    out += "  " + format_bytes(site.bytes) + " in " + std::to_string(site.count) + " (" +
           std::string(api_name(site.site.api)) + ") at " + site.location + "\n";
    out += stack_text(site.stack, site.named_frame + 1, 6, 5);  // from the site's frame outwards
  }
  return out;
}

bool snapshot_view(const std::vector<std::string>& files, const AnalysisOptions& options, SnapshotView& out,
                   std::string& error) {
  for (const std::string& file : files)
    if (!read_snapshot(file, options, out.snapshots.emplace_back(), error)) return false;
  return true;
}

nlohmann::json to_json(const SnapshotView& view) {
  if (view.snapshots.size() == 1) return to_json(view.snapshots[0]);
  nlohmann::json all = nlohmann::json::array();
  for (const SnapshotReport& s : view.snapshots) all.push_back(to_json(s));
  return {{"snapshots", all}};
}

std::string to_text(const SnapshotView& view) {
  std::string text;
  for (const SnapshotReport& s : view.snapshots) text += (text.empty() ? "" : "\n") + to_text(s);
  return text;
}

}  // namespace memtrace
