#include <algorithm>

#include "memtrace/analysis/report_render.h"
#include "memtrace/analysis/units.h"
#include "memtrace/analysis/views.h"

namespace memtrace {

nlohmann::json peak_json(const std::vector<ProcessAnalysis>& processes, const PeakOptions& options) {
  nlohmann::json out = {{"layer", std::string(layer_name(options.layer))}, {"processes", nlohmann::json::array()}};
  uint64_t sum = 0, max = 0;
  size_t with_peak = 0;
  for (const ProcessAnalysis& p : processes) {
    const ProcessReport& r = options.layer == Layer::kAllocated ? p.allocated : p.report;
    nlohmann::json devices = nlohmann::json::array();
    uint64_t process_peak = 0;
    for (const DeviceReport& d : r.devices) {
      if (options.device && d.device != *options.device) continue;
      nlohmann::json sites = nlohmann::json::array();
      for (const SiteTotal& s : d.peak_sites) {
        nlohmann::json site = site_json(s);
        site["share"] = d.peak_bytes ? static_cast<double>(s.bytes) / static_cast<double>(d.peak_bytes) : 0.0;
        sites.push_back(std::move(site));
      }
      devices.push_back({{"device", d.device},
                         {"name", d.name},
                         {"uuid", d.uuid},
                         {"total_bytes", d.total_bytes},
                         {"peak_bytes", d.peak_bytes},
                         {"peak_time_ns", d.peak_time_ns},
                         {"peak_step", p.step_starts.empty() ? nlohmann::json(nullptr) : nlohmann::json(d.peak_step)},
                         {"peak_phase", d.peak_phase},
                         {"sites", sites}});
      process_peak += d.peak_bytes;
    }
    if (!devices.empty()) ++with_peak;
    sum += process_peak;
    max = std::max(max, process_peak);
    out["processes"].push_back({{"pid", p.report.pid},
                                {"command", p.report.command},
                                {"trace", p.report.trace_path},
                                {"steps", p.step_starts.size()},
                                {"layer_recorded", options.layer != Layer::kAllocated || p.has_allocated},
                                {"devices", devices}});
  }
  if (processes.size() > 1) {
    double mean = with_peak ? static_cast<double>(sum) / static_cast<double>(with_peak) : 0.0;
    out["all_processes"] = {{"sum_of_peaks_bytes", sum},
                            {"largest_peak_bytes", max},
                            {"mean_peak_bytes", mean},
                            {"imbalance", mean > 0 ? static_cast<double>(max) / mean : 1.0}};
  }
  return out;
}

std::string peak_text(const nlohmann::json& peak) {
  std::string out, layer = peak["layer"].get<std::string>();
  for (const auto& p : peak["processes"]) {
    if (!out.empty()) out += "\n";
    out += process_heading(p);
    if (!p["layer_recorded"].get<bool>()) {
      out += "  the allocated layer was not recorded (no allocator described its regions through NVTX)\n";
      continue;
    }
    if (p["devices"].empty()) out += "  no device memory in the " + layer + " layer\n";
    for (const auto& d : p["devices"]) {
      const uint64_t peak_bytes = d["peak_bytes"];
      out += "  device " + std::to_string(d["device"].get<int>()) + ": peak " + layer + " " + format_bytes(peak_bytes) +
             " at " + format_duration_ns(d["peak_time_ns"]);
      if (!d["peak_step"].is_null()) out += ", step " + std::to_string(d["peak_step"].get<uint64_t>());
      if (!d["peak_phase"].get<std::string>().empty()) out += ", in " + d["peak_phase"].get<std::string>();
      out += "\n";
      if (d["sites"].empty()) continue;
      out += "    " + pad("bytes", 11, true) + pad("share", 8, true) + pad("count", 8, true) + "  " + pad("api", 24) +
             "allocated at\n";
      for (const auto& s : d["sites"])
        out += "    " + pad(format_bytes(s["bytes"]), 11, true) + pad(percent(s["bytes"], peak_bytes), 8, true) +
               pad(std::to_string(s["count"].get<uint64_t>()), 8, true) + "  " + pad(s["api"], 24) +
               s["location"].get<std::string>() + "\n";
    }
  }
  if (peak.contains("all_processes")) {
    const auto& a = peak["all_processes"];
    char imbalance[32];
    std::snprintf(imbalance, sizeof imbalance, "%.2f", a["imbalance"].get<double>());
    out += "\nall processes: peaks add up to " + format_bytes(a["sum_of_peaks_bytes"]) + "; largest " +
           format_bytes(a["largest_peak_bytes"]) + ", mean " +
           format_bytes(static_cast<uint64_t>(a["mean_peak_bytes"].get<double>())) + ", imbalance " + imbalance +
           " (largest / mean)\n";
  }
  return out;
}

}  // namespace memtrace
