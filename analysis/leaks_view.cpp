#include <set>

#include "memtrace/analysis/report_render.h"
#include "memtrace/analysis/units.h"
#include "memtrace/analysis/views.h"

namespace memtrace {

namespace {

nlohmann::json growth_json(const SiteGrowth& g) {
  return {{"device", g.device},
          {"layer", std::string(layer_name(g.layer))},
          {"api", std::string(api_name(g.site.api))},
          {"location", g.location},
          {"bytes_per_step", g.bytes_per_step},
          {"first_step", g.first_step},
          {"steps_rising", g.steps_rising},
          {"intervals", g.intervals},
          {"bytes_at_last_step", g.bytes_at_last_boundary},
          {"stack", stack_json(g.stack)}};
}

}  // namespace

nlohmann::json leaks_json(const std::vector<ProcessAnalysis>& processes) {
  nlohmann::json out = {{"processes", nlohmann::json::array()}};
  uint64_t leaked = 0;
  for (const ProcessAnalysis& p : processes) {
    nlohmann::json growth = nlohmann::json::array();
    std::set<std::pair<std::string, std::string>> growing;  // (api, location)
    for (const SiteGrowth& g : p.growth) {
      growth.push_back(growth_json(g));
      growing.emplace(std::string(api_name(g.site.api)), g.location);
    }
    nlohmann::json devices = nlohmann::json::array();
    for (const DeviceReport& d : p.report.devices) {
      nlohmann::json sites = nlohmann::json::array();
      for (const SiteTotal& s : d.exit_sites) {
        nlohmann::json site = site_json(s);
        site["kind"] = growing.count({std::string(api_name(s.site.api)), s.location}) ? "growing" : "kept";
        sites.push_back(std::move(site));
      }
      leaked += d.live_at_exit_bytes;
      devices.push_back({{"device", d.device},
                         {"live_at_exit_bytes", d.live_at_exit_bytes},
                         {"live_at_exit_count", d.live_at_exit_count},
                         {"sites", sites}});
    }
    out["processes"].push_back({{"pid", p.report.pid},
                                {"command", p.report.command},
                                {"trace", p.report.trace_path},
                                {"complete", p.report.complete},
                                {"steps", p.step_starts.size()},
                                {"step_pattern", p.step_pattern},
                                {"devices", devices},
                                {"growth", growth}});
  }
  out["live_at_exit_bytes"] = leaked;
  return out;
}

std::string leaks_text(const nlohmann::json& leaks) {
  std::string out;
  for (const auto& p : leaks["processes"]) {
    if (!out.empty()) out += "\n";
    out += process_heading(p);
    if (!p["complete"].get<bool>()) out += "  (the trace was cut short: live at its end, not at the process's end)\n";
    for (const auto& d : p["devices"]) {
      out += "  device " + std::to_string(d["device"].get<int>()) + ": " + format_bytes(d["live_at_exit_bytes"]) +
             " live at exit in " + std::to_string(d["live_at_exit_count"].get<uint64_t>()) + " allocations\n";
      for (const auto& s : d["sites"])
        out += "    " + pad(format_bytes(s["bytes"]), 11, true) + pad(std::to_string(s["count"].get<uint64_t>()), 8, true) +
               "  " + pad(s["kind"].get<std::string>() == "growing" ? "GROWING" : "kept", 9) + pad(s["api"], 24) +
               s["location"].get<std::string>() + "\n";
    }
    const size_t steps = p["steps"];
    if (steps < 3) {
      out += "  growth per step: needs 3 steps or more (found " + std::to_string(steps) + " matching /" +
             p["step_pattern"].get<std::string>() + "/; name them with --step REGEX)\n";
      continue;
    }
    if (p["growth"].empty()) {
      out += "  growth per step: none over " + std::to_string(steps) + " steps\n";
      continue;
    }
    out += "  growing step by step (over " + std::to_string(steps) + " steps):\n";
    for (const auto& g : p["growth"]) {
      out += "    " + pad(format_bytes(g["bytes_per_step"]) + "/step", 16, true) + "  since step " +
             pad(std::to_string(g["first_step"].get<uint64_t>()), 5) + " rising " +
             std::to_string(g["steps_rising"].get<uint64_t>()) + "/" + std::to_string(g["intervals"].get<uint64_t>()) +
             "  " + g["layer"].get<std::string>() + "  " + g["api"].get<std::string>() + "  " +
             g["location"].get<std::string>() + "\n";
      int shown = 0;
      for (const auto& f : g["stack"]) {
        if (++shown > 6) break;
        out += std::string(10, ' ') + f["function"].get<std::string>() +
               (f["file"].get<std::string>().empty() ? "" : "  " + f["file"].get<std::string>() + ":" +
                                                                std::to_string(f["line"].get<uint32_t>())) +
               "\n";
      }
    }
  }
  return out;
}

}  // namespace memtrace
