#include "memtrace/analysis/trace_set.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

namespace memtrace {

namespace fs = std::filesystem;

std::vector<std::string> find_traces(const std::string& path, std::string& error) {
  std::error_code ec;
  fs::file_status status = fs::status(path, ec);
  if (ec || !fs::exists(status)) {
    error = path + " does not exist";
    return {};
  }
  if (!fs::is_directory(status)) return {path};
  std::vector<std::string> traces;
  for (const auto& entry : fs::directory_iterator(path, ec))
    if (entry.path().extension() == ".memtrace" && entry.is_regular_file()) traces.push_back(entry.path().string());
  if (ec) {
    error = "cannot read folder " + path + ": " + ec.message();
    return {};
  }
  if (traces.empty()) error = "no .memtrace traces in " + path + " (did the program use CUDA?)";
  std::sort(traces.begin(), traces.end());
  return traces;
}

bool analyze_trace(const std::string& path, const ReportOptions& options, ProcessReport& report, std::string& error) {
  std::unique_ptr<TraceReader> reader = TraceReader::open(path, error);
  if (!reader) return false;
  const pb::TraceHeader& h = reader->header();
  report = ProcessReport();
  report.pid = h.pid();
  report.command.assign(h.command().begin(), h.command().end());
  report.trace_path = path;

  Replay replay;
  StackView stacks(*reader, options.keep_cuda_frames);
  ReportBuilder builder(options.top_sites,
                        [&](uint64_t stack_id) { return stacks.site_key(stack_id, options.grouping); });
  Event event;
  uint64_t last_t = 0;
  while (reader->next(event)) {
    builder.add(replay.apply(event));
    last_t = event.t_ns;
    ++report.events;
  }
  builder.finish(report);
  report.end_time_ns = last_t;
  report.problem = reader->problem();
  report.complete = reader->footer().has_value();
  if (const auto& footer = reader->footer()) {
    if (footer->has_exit_status()) report.exit_status = footer->exit_status();
    report.end_reason = footer->end_reason();
    report.dropped_events = footer->dropped_events();
    report.incomplete_records = footer->incomplete_records();
    report.end_time_ns = std::max(report.end_time_ns, footer->end_ns());
  }
  for (DeviceReport& d : report.devices) {
    for (const pb::Device& known : reader->header().devices()) {
      if (known.ordinal() != d.device) continue;
      d.name = known.name();
      d.total_bytes = known.total_bytes();
    }
    for (SiteTotal& s : d.peak_sites) {
      s.stack = stacks.frames(s.site.stack_id);
      s.stack_flags = stacks.flags(s.site.stack_id);
      std::optional<FrameView> named = stacks.site_frame(s.site.stack_id, options.grouping);
      if (!named && !s.stack.empty()) named = s.stack.front();
      s.location = named ? frame_label(*named) : "(no stack)";
    }
  }
  // Snapshots beside the trace: <reason>-<pid>[-<n>].memsnap.
  std::error_code ec;
  fs::path folder = fs::path(path).parent_path();
  if (folder.empty()) folder = ".";
  const std::string pid = "-" + std::to_string(report.pid);
  for (const auto& entry : fs::directory_iterator(folder, ec)) {
    std::string name = entry.path().filename().string();
    size_t at = name.find(pid);
    if (entry.path().extension() != ".memsnap" || at == std::string::npos) continue;
    char after = name[at + pid.size()];
    if (after == '-' || after == '.') report.snapshots.push_back(entry.path().string());
  }
  std::sort(report.snapshots.begin(), report.snapshots.end());
  std::sort(report.devices.begin(), report.devices.end(),
            [](const DeviceReport& a, const DeviceReport& b) { return a.device < b.device; });
  return true;
}

}  // namespace memtrace
