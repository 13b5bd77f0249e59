#include "memtrace/views/report_render.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "memtrace.pb.h"
#include "memtrace/base/units.h"

namespace memtrace {

std::string escape_xml(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

ProcessId process_id(const ProcessReport& r) {
  return ProcessId{r.pid,        r.command,    r.trace_path,    r.host,     r.rank,
                   r.local_rank, r.world_size, r.imported_from, r.joined_by};
}

std::string trace_end_words(const ProcessId& p) { return p.joined_by.empty() ? "exit" : "the end of recording"; }

nlohmann::json process_json(const ProcessId& p) {
  auto optional = [](const std::optional<int32_t>& v) { return v ? nlohmann::json(*v) : nlohmann::json(); };
  return {{"pid", p.pid},
          {"command", p.command},
          {"trace", p.trace},
          {"host", p.host},
          {"rank", optional(p.rank)},
          {"local_rank", optional(p.local_rank)},
          {"world_size", optional(p.world_size)},
          {"imported_from", p.imported_from}};
}

nlohmann::json device_json(const DeviceReport& d) {
  return {{"device", d.device}, {"name", d.name}, {"uuid", d.uuid}, {"total_bytes", d.total_bytes}};
}

std::string process_heading(const ProcessId& p) {
  if (!p.imported_from.empty()) return p.imported_from + " " + command_line(p.command) + "\n";
  if (p.rank) {
    std::string of = p.world_size ? " of " + std::to_string(*p.world_size) : "";
    return "rank " + std::to_string(*p.rank) + of + " (process " + std::to_string(p.pid) +
           (p.host.empty() ? "" : " on " + p.host) + "): " + command_line(p.command) + "\n";
  }
  return "process " + std::to_string(p.pid) + (p.joined_by.empty() ? "" : " (" + p.joined_by + ")") + ": " +
         command_line(p.command) + "\n";
}

std::string process_label(const ProcessId& p) {
  if (!p.imported_from.empty()) {
    std::string file = p.command.empty() ? "" : p.command.front();
    return "snapshot " + file.substr(file.rfind('/') + 1);
  }
  return p.rank ? "rank " + std::to_string(*p.rank) : "pid " + std::to_string(p.pid);
}

// Where recording began while the process ran (memtrace attach, memtrace.record): what the device
// held then, and what of it the trace knows one allocation at a time.
std::string joined_line(const ProcessReport& p, const DeviceReport& d) {
  const bool attached = p.joined_by == "memtrace attach";
  std::string line = attached ? "at the attach" : "when recording started (memtrace.record)";
  line += d.first_sampled ? " (" + format_duration_ns(d.first_sample_ns) + "): " + format_bytes(d.first_sample_bytes) +
                                " in use on the device"
                          : ": the device's use was not sampled";
  if (d.before_recording_count)
    return line + "; of it memtrace knows " + format_bytes(d.before_recording_bytes) + " in " +
           counted(d.before_recording_count, "allocation") + " the allocator held then (the site \"live before " +
           (attached ? "memtrace attached" : "recording started") +
           "\"); the rest is the CUDA context's and "
           "libraries', or was allocated before and is not known one by one";
  return line + ", allocated before " + (attached ? "memtrace attached" : "recording started") +
         " or the CUDA context's: not in this trace one allocation at a time; the figures here count what came after";
}

std::string device_layer_line(const DeviceReport& d, bool joined) {
  if (!d.device_samples) return "device used: not sampled (an import, or a trace from an older memtrace)";
  const OutsideParts& p = d.outside_parts_at_peak;
  std::string parts;
  if (p.pools_held) parts += format_bytes(p.pools_held) + " kept by stream-ordered pools beyond their allocations, ";
  if (p.graphs_reserved) parts += format_bytes(p.graphs_reserved) + " by CUDA graphs, ";
  if (p.other_processes) parts += format_bytes(p.other_processes) + " by other processes (NVML), ";
  if (!parts.empty()) parts += "the rest: ";
  return "device used at the peak " + format_bytes(d.device_at_peak_bytes()) + ": " + format_bytes(d.peak_bytes) +
         " reserved + " + format_bytes(d.outside_reserved_at_peak_bytes) + " outside it (" + parts +
         (joined ? "allocations from before recording started, " : "") + p.rest() + "; cudaMemGetInfo at " +
         format_duration_ns(d.outside_sampled_at_ns) + ")";
}

std::string percent(uint64_t part, uint64_t whole) {
  char text[16];
  std::snprintf(text, sizeof text, "%.1f%%",
                whole ? 100.0 * static_cast<double>(part) / static_cast<double>(whole) : 0.0);
  return text;
}

std::string pad(std::string s, size_t width, bool right) {
  if (s.size() >= width) return s;
  return right ? std::string(width - s.size(), ' ') + s : s + std::string(width - s.size(), ' ');
}

nlohmann::json site_json(const SiteTotal& s) {
  nlohmann::json site = {{"api", std::string(api_name(s.site.api))},
                         {"bytes", s.bytes},
                         {"count", s.count},
                         {"location", s.location},
                         {"stack", stack_json(s.stack)}};
  if (s.stack_flags & pb::STACK_TRUNCATED) site["stack_truncated"] = true;
  if (s.stack_flags & pb::STACK_PYTHON_NO_GIL) site["python_frames"] = "gil_not_held";
  if (s.stack_flags & pb::STACK_NO_PYTHON_FRAMES) site["python_frames"] = "none";
  return site;
}

std::string stack_text(const std::vector<FrameView>& frames, size_t first, size_t indent, size_t max_frames) {
  std::string out;
  size_t shown = 0;
  // Under Python the interpreter's own frames (ctypes' foreign calls among them) say nothing the
  // Python frames do not.
  const bool python = std::any_of(frames.begin(), frames.end(), [](const FrameView& f) { return f.python; });
  for (size_t k = first; k < frames.size(); ++k) {
    const FrameView& f = frames[k];
    if (is_startup_frame(f) || (python && is_interpreter_frame(f))) continue;
    if (shown++ == max_frames) {
      out += std::string(indent, ' ') + "...\n";
      break;
    }
    out += std::string(indent, ' ') + frame_label(f) + "\n";
  }
  return out;
}

nlohmann::json stack_json(const std::vector<FrameView>& frames) {
  nlohmann::json out = nlohmann::json::array();
  for (const FrameView& f : frames) {
    nlohmann::json frame = {{"kind", f.python ? "python" : "native"},
                            {"function", f.function},
                            {"file", f.file},
                            {"line", f.line},
                            {"module", f.module}};
    if (!f.python) {
      frame["offset"] = f.offset;
      if (f.inlined) frame["inlined"] = true;
    }
    out.push_back(std::move(frame));
  }
  return out;
}

std::string command_line(const std::vector<std::string>& command) {
  std::string line;
  for (const auto& arg : command) {
    if (!line.empty()) line += ' ';
    line += arg.find_first_of(" \t'\"") == std::string::npos && !arg.empty() ? arg : "'" + arg + "'";
  }
  return line;
}

nlohmann::json torch_counters_json(const TorchCounters& c) {
  nlohmann::json checks = nlohmann::json::array();
  for (const TorchCounterCheck& check : c.checks)
    checks.push_back({{"figure", check.figure},
                      {"pytorch", check.pytorch},
                      {"memtrace", check.memtrace ? nlohmann::json(*check.memtrace) : nlohmann::json(nullptr)},
                      {"agrees", check.agrees()}});
  std::optional<int64_t> rounding = c.rounding_at_peak();
  return {{"device", c.device},
          {"when", c.when},
          {"t_ns", c.t_ns},
          {"figures", c.figures},
          {"checks", checks},
          {"agrees", c.agrees()},
          {"reset_seen", c.reset_seen},
          {"rounding_at_peak_bytes", rounding ? nlohmann::json(*rounding) : nlohmann::json(nullptr)}};
}

std::string torch_counters_text(const TorchCounters& c, size_t indent, Layer layer,
                                std::optional<uint64_t> reserved_peak) {
  const std::string in(indent, ' ');
  auto wanted = [&](const std::string& figure) {
    if (layer == Layer::kReserved) return figure.rfind("reserved_bytes", 0) == 0;
    if (layer == Layer::kAllocated) return figure.rfind("reserved_bytes", 0) != 0;
    return true;
  };
  auto value = [](const std::string& figure, int64_t v) {
    if (figure.find("_bytes") == std::string::npos) return std::to_string(v);
    return v < 0 ? "-" + format_bytes(static_cast<uint64_t>(-v)) : format_bytes(static_cast<uint64_t>(v));
  };
  std::string figures, alone;
  bool checked = false, agree = true;
  for (const TorchCounterCheck& check : c.checks) {
    if (!wanted(check.figure)) continue;
    std::string shown = check.figure + " " + value(check.figure, check.pytorch);
    if (!check.memtrace) {
      alone += (alone.empty() ? "" : ", ") + shown;
      continue;
    }
    checked = true;
    if (!check.agrees()) {
      agree = false;
      shown += " (memtrace: " + value(check.figure, *check.memtrace) + ", " +
               std::to_string(*check.memtrace - check.pytorch) + " bytes apart)";
    }
    figures += (figures.empty() ? "" : ", ") + shown;
  }
  std::string out = in + "PyTorch's own counters " + (c.when == "oom" ? "at its out-of-memory" : "at exit") +
                    " (torch.cuda.memory_stats" + (c.reset_seen ? "; peaks since the program reset them" : "") + ")";
  out += !checked ? ":\n" : agree ? ": memtrace's figures agree to the byte\n" : ": memtrace's figures DISAGREE\n";
  if (!figures.empty()) out += in + "  " + figures + "\n";
  if (!alone.empty()) out += in + "  " + alone + " (memtrace did not record that layer)\n";
  if (auto a = c.figures.find("allocated_bytes.all.peak"); a != c.figures.end() && wanted(a->first)) {
    out += in + "  allocated_bytes.all.peak " + value(a->first, a->second);
    if (auto rounding = c.rounding_at_peak())
      out += ": its blocks round the requests up, by " + value(a->first, *rounding) + " at the peaks";
    out += "\n";
  }
  // The reserved layer holds every allocation call; PyTorch's reserved_bytes only its allocator's
  // segments. Libraries allocate for themselves beside it: cuBLAS 13 takes 64 MiB and 129 KiB with
  // cudaMalloc at each cublasCreate (seen on an H200 under PyTorch 2.11: a handle per thread that
  // runs matrix products), NCCL its buffers. The two peaks would otherwise seem to contradict.
  for (const TorchCounterCheck& check : c.checks)
    if (reserved_peak && c.when == "exit" && !c.reset_seen && check.figure == "reserved_bytes.all.peak" &&
        check.memtrace && *reserved_peak > static_cast<uint64_t>(*check.memtrace))
      out += in + "  the reserved peak counts every allocation call, PyTorch's reserved_bytes only its segments: " +
             format_bytes(*reserved_peak - static_cast<uint64_t>(*check.memtrace)) +
             " more, allocated beside PyTorch's allocator (by libraries such as cuBLAS; `peak --by native` names "
             "them)\n";
  if (!agree)
    out += in + "  memtrace read PyTorch's allocator wrong here: please report it, with `memtrace report --json`\n";
  return out;
}

nlohmann::json report_json(const std::vector<ProcessReport>& processes) {
  nlohmann::json out = {{"processes", nlohmann::json::array()}};
  for (const ProcessReport& p : processes) {
    nlohmann::json events = nlohmann::json::object();
    for (const auto& [api, counts] : p.calls)
      events[std::string(api_name(api))] = {{"calls", counts.calls},
                                            {"failed", counts.failed},
                                            {"bytes", counts.bytes},
                                            {"interrupted", counts.interrupted}};
    nlohmann::json devices = nlohmann::json::array();
    for (const DeviceReport& d : p.devices) {
      nlohmann::json sites = nlohmann::json::array();
      for (const SiteTotal& s : d.peak_sites) sites.push_back(site_json(s));
      nlohmann::json device = device_json(d);
      device.update({{"peak_reserved_bytes", d.peak_bytes},
                     {"peak_time_ns", d.peak_time_ns},
                     {"live_at_exit_bytes", d.live_at_exit_bytes},
                     {"live_at_exit_count", d.live_at_exit_count},
                     {"top_sites_at_peak", sites},
                     {"device_samples", d.device_samples},
                     {"device_at_peak_bytes", d.device_at_peak_bytes()},
                     {"outside_reserved_at_peak_bytes", d.outside_reserved_at_peak_bytes},
                     {"outside_sampled_at_ns", d.outside_sampled_at_ns},
                     {"device_used_max_sampled_bytes", d.device_used_max_sampled_bytes},
                     {"pool_held_at_peak_bytes", d.outside_parts_at_peak.pools_held},
                     {"graph_reserved_at_peak_bytes", d.outside_parts_at_peak.graphs_reserved},
                     {"other_processes_at_peak_bytes", d.outside_parts_at_peak.other_processes},
                     {"other_processes_known", d.outside_parts_at_peak.other_processes_known}});
      if (!d.owners_at_peak.empty()) {
        nlohmann::json owners = owners_json(d);
        device["owners"] = owners["owners"];
        device["owners_total_bytes"] = owners["owners_total_bytes"];
        device["nvml_process_most_bytes"] = owners["nvml_process_most_bytes"];
      }
      if (!p.joined_by.empty())  // what the device held when recording began, and what of it is known
        device["at_recording_start"] = {
            {"device_used_bytes", d.first_sampled ? nlohmann::json(d.first_sample_bytes) : nlohmann::json()},
            {"sampled_at_ns", d.first_sample_ns},
            {"known_bytes", d.before_recording_bytes},
            {"known_count", d.before_recording_count}};
      devices.push_back(std::move(device));
    }
    nlohmann::json oom_events = nlohmann::json::array();
    for (const OomEvent& o : p.oom_events) {
      oom_events.push_back({{"t_ns", o.t_ns},
                            {"api", std::string(api_name(o.api))},
                            {"size", o.size},
                            {"device", o.device},
                            {"device_free_bytes", o.device_free_bytes},
                            {"device_total_bytes", o.device_total_bytes}});
      if (!o.owners.empty())
        oom_events.back()["owners"] = owner_rows_json(o.owners, o.device_total_bytes - o.device_free_bytes);
    }
    nlohmann::json process = process_json(process_id(p));
    process.update({
        {"exit_status", p.exit_status ? nlohmann::json(*p.exit_status) : nlohmann::json(nullptr)},
        {"events", events},
        {"devices", devices},
        {"complete", p.complete},
        {"problem", p.problem},
        {"end_reason", p.end_reason},
        {"events_total", p.events},
        {"dropped_events", p.dropped_events},
        {"longest_wait_ns", p.longest_wait_ns},
        {"notices", p.notices},
        {"captured_events", p.captured_events},
        {"events_from_cupti", p.cupti_events},
        {"activity_records", p.activity_records},
        {"incomplete_records", p.incomplete_records},
        {"unmatched_frees", p.unmatched_frees},
        {"joined_by", p.joined_by.empty() ? nlohmann::json() : nlohmann::json(p.joined_by)},
        {"pinned_host_peak_bytes", p.pinned_host_peak_bytes},
        {"oom_events", oom_events},
        {"snapshots", p.snapshots},
    });
    process["pytorch_counters"] = nlohmann::json::array();
    for (const TorchCounters& c : p.pytorch_counters) process["pytorch_counters"].push_back(torch_counters_json(c));
    if (!p.counts.empty()) process["counts"] = p.counts;
    out["processes"].push_back(std::move(process));
  }
  return out;
}

std::string report_text(const std::vector<ProcessReport>& processes) {
  std::string out;
  for (const ProcessReport& p : processes) {
    if (!out.empty()) out += "\n";
    out += process_heading(process_id(p));
    out += "  ended: " + (p.end_reason.empty() ? std::string("unknown") : p.end_reason);
    if (p.exit_status) out += ", exit status " + std::to_string(*p.exit_status);
    out += "; " + std::to_string(p.events) + " events over " + format_duration_ns(p.end_time_ns);
    if (p.cupti_events) out += " (" + std::to_string(p.cupti_events) + " seen through CUPTI)";
    out += "\n";
    if (!p.complete) out += "  WARNING: incomplete trace: " + p.problem + "\n";
    if (p.dropped_events)
      out +=
          "  WARNING: " + std::to_string(p.dropped_events) +
          " events were lost (memtrace was stalled past --max-stall, or could not keep up); figures below miss them\n";
    for (const auto& [api, c] : p.calls)
      if (c.interrupted)
        out += "  the process died inside " + std::to_string(c.interrupted) + " call" + (c.interrupted > 1 ? "s" : "") +
               " of " + std::string(api_name(api)) + (c.interrupted > 1 ? ": each" : ": it") +
               " may or may not have taken effect on the device\n";
    for (const std::string& notice : p.notices) out += "  note: " + notice + "\n";
    if (!p.joined_by.empty() && p.unmatched_frees)
      out += "  " + counted(p.unmatched_frees, "free") + " of memory allocated before recording started (" +
             p.joined_by + "): not in this trace\n";
    if (p.longest_wait_ns >= 10'000'000)  // 10 ms: below that, nobody notices
      out += "  memtrace held the program up for at most " + format_duration_ns(p.longest_wait_ns) +
             " (waiting for room in its event ring)\n";
    if (p.captured_events)
      out += "  " + std::to_string(p.captured_events) +
             " stream-ordered calls were made while capturing CUDA graphs: their memory is the graphs' "
             "(obtained at each launch)\n";
    if (p.incomplete_records)
      out += "  WARNING: " + std::to_string(p.incomplete_records) + " events were cut off by the process's death\n";

    if (p.calls.empty())
      out += "\n  the program used CUDA (it initialised CUDA or asked for its devices) but made no allocation call\n";
    else
      out += "\n  " + pad("API", kApiColumn) + pad("calls", 10, true) + pad("failed", 10, true) +
             pad("bytes", 12, true) + "\n";
    for (const auto& [api, c] : p.calls) {
      const bool mark = api_info(api).op == Op::kMark;  // a step, a range, a mark: no bytes to count
      out += "  " + pad(std::string(api_name(api)), kApiColumn) + pad(std::to_string(c.calls), 10, true) +
             pad(std::to_string(c.failed), 10, true) + pad(mark ? "-" : format_bytes(c.bytes), 12, true) + "\n";
    }
    if (p.pinned_host_peak_bytes)
      out += "\n  pinned host memory: peak " + format_bytes(p.pinned_host_peak_bytes) + "\n";

    for (const DeviceReport& d : p.devices) {
      std::string about = d.name.empty() ? ""
                                         : " (" + d.name + ", " + format_bytes(d.total_bytes) +
                                               (d.uuid.empty() ? "" : ", " + d.uuid) + ")";
      const bool joined = !p.joined_by.empty();
      out += "\n  device " + std::to_string(d.device) + about + ": peak reserved " + format_bytes(d.peak_bytes) +
             " at " + format_duration_ns(d.peak_time_ns) + "; live at " +
             (joined && !p.exit_status ? "the end of recording " : "exit ") + format_bytes(d.live_at_exit_bytes) +
             " in " + counted(d.live_at_exit_count, "allocation") + "\n";
      if (joined) out += "    " + joined_line(p, d) + "\n";
      out += "    " + device_layer_line(d, joined) + "\n";
      if (!d.owners_at_peak.empty()) out += "    who held the device at the peak:\n" + owners_text(d, 4);
      for (const TorchCounters& c : p.pytorch_counters)
        if (c.device == d.device && c.when == "exit") out += torch_counters_text(c, 4, Layer::kUnknown, d.peak_bytes);
      if (d.peak_sites.empty()) continue;
      out += "    largest sites at the peak:\n";
      out += "    " + pad("bytes", 11, true) + pad("share", 8, true) + pad("count", 8, true) + "  " +
             pad("api", kApiColumn) + "allocated at\n";
      for (const SiteTotal& s : d.peak_sites) {
        out += "    " + pad(format_bytes(s.bytes), 11, true) + pad(percent(s.bytes, d.peak_bytes), 8, true) +
               pad(std::to_string(s.count), 8, true) + "  " + pad(std::string(api_name(s.site.api)), kApiColumn) +
               s.location + "\n";
        if (s.stack_flags & pb::STACK_PYTHON_NO_GIL)
          out +=
              std::string(57, ' ') + "(no Python frames: the GIL was not held, or PyTorch's allocator held its lock)\n";
      }
    }
    if (p.devices.empty() && !p.calls.empty()) out += "\n  no device memory was allocated\n";
    if (!p.oom_events.empty()) {
      out += "\n  out of memory " + std::to_string(p.oom_events.size()) + " time" +
             (p.oom_events.size() > 1 ? "s" : "") + ":\n";
      for (const OomEvent& o : p.oom_events) {
        out += "    at " + format_duration_ns(o.t_ns) + ": " + std::string(api_name(o.api)) + " of " +
               format_bytes(o.size);
        if (o.device >= 0) out += " on device " + std::to_string(o.device);
        if (o.device_total_bytes)
          out += " (" + format_bytes(o.device_free_bytes) + " free of " + format_bytes(o.device_total_bytes) + ")";
        out += "\n";
        if (!o.owners.empty()) {
          const uint64_t used = o.device_total_bytes - o.device_free_bytes;
          out += "      who held the device then:\n" +
                 owners_text(o.owners, used,
                             o.device_total_bytes
                                 ? "in all: the device's use the failed call reported (" + format_bytes(used) + ")"
                                 : "in all: reserved then (the call reported no device figures)",
                             6);
        }
      }
      for (const TorchCounters& c : p.pytorch_counters)
        if (c.when == "oom") out += torch_counters_text(c, 4);
    }
    for (const std::string& snap : p.snapshots) out += "  snapshot: " + snap + "  (memtrace snapshot " + snap + ")\n";
  }
  return out;
}

}  // namespace memtrace
