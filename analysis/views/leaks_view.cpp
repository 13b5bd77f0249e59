#include <set>

#include "memtrace/base/units.h"
#include "memtrace/views/report_render.h"
#include "memtrace/views/views.h"

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

std::string kind_name(LeaksView::Kind kind) {
  return kind == LeaksView::Kind::kGrowing ? "growing" : kind == LeaksView::Kind::kKept ? "kept" : "live";
}

}  // namespace

LeaksView leaks_view(const std::vector<ProcessAnalysis>& processes) {
  LeaksView view;
  for (const ProcessAnalysis& p : processes) {
    LeaksView::Process process;
    process.id = process_id(p.report);
    process.complete = p.report.complete;
    process.steps = p.step_starts.size();
    process.step_pattern = p.step_pattern;
    process.growth_unmeasured = growth_unmeasured(process.steps, p.step_pattern);
    process.growth = p.growth;
    std::set<std::pair<Api, uint64_t>> growing;  // (api, group)
    for (const SiteGrowth& g : p.growth) growing.emplace(g.site.api, g.group);
    // What the program allocated: PyTorch's tensors when the trace has them, else the reserved layer.
    process.layer = p.pytorch ? Layer::kAllocated : Layer::kReserved;
    for (const DeviceReport& d : (p.pytorch ? p.allocated : p.report).devices) {
      LeaksView::Device device{d.device, d.live_at_exit_bytes, d.live_at_exit_count, {}};
      for (const SiteTotal& s : d.exit_sites) {
        LeaksView::Kind kind = !process.growth_unmeasured.empty()         ? LeaksView::Kind::kLive
                               : growing.count({s.site.api, s.group}) > 0 ? LeaksView::Kind::kGrowing
                                                                          : LeaksView::Kind::kKept;
        device.sites.push_back({s, kind});
      }
      view.live_at_exit_bytes += d.live_at_exit_bytes;
      process.devices.push_back(std::move(device));
    }
    view.processes.push_back(std::move(process));
  }
  return view;
}

nlohmann::json to_json(const LeaksView& view) {
  nlohmann::json out = {{"processes", nlohmann::json::array()}};
  for (const LeaksView::Process& p : view.processes) {
    nlohmann::json growth = nlohmann::json::array();
    for (const SiteGrowth& g : p.growth) growth.push_back(growth_json(g));
    nlohmann::json devices = nlohmann::json::array();
    for (const LeaksView::Device& d : p.devices) {
      nlohmann::json sites = nlohmann::json::array();
      for (const LeaksView::Site& s : d.sites) {
        nlohmann::json site = site_json(s.site);
        site["kind"] = kind_name(s.kind);
        sites.push_back(std::move(site));
      }
      devices.push_back({{"device", d.device},
                         {"live_at_exit_bytes", d.live_bytes},
                         {"live_at_exit_count", d.live_count},
                         {"sites", sites}});
    }
    nlohmann::json process = process_json(p.id);
    process.update({{"layer", std::string(layer_name(p.layer))},
                    {"complete", p.complete},
                    {"steps", p.steps},
                    {"step_pattern", p.step_pattern},
                    {"growth_measured", p.growth_unmeasured.empty()},
                    {"devices", devices},
                    {"growth", growth}});
    out["processes"].push_back(std::move(process));
  }
  out["live_at_exit_bytes"] = view.live_at_exit_bytes;
  return out;
}

std::string to_text(const LeaksView& view) {
  std::string out;
  for (const LeaksView::Process& p : view.processes) {
    if (!out.empty()) out += "\n";
    out += process_heading(p.id);
    if (!p.complete) out += "  (the trace was cut short: live at its end, not at the process's end)\n";
    bool any_site = false;
    for (const LeaksView::Device& d : p.devices) any_site |= !d.sites.empty();
    if (!p.growth_unmeasured.empty() && any_site)
      out += "  (without steps, growth cannot be told from memory allocated once: sites are marked live)\n";
    for (const LeaksView::Device& d : p.devices) {
      out += "  device " + std::to_string(d.device) + ": " + format_bytes(d.live_bytes) + " live at " +
             trace_end_words(p.id) + " in " +
             (p.layer == Layer::kAllocated ? counted(d.live_count, "tensor") + " (the allocated layer)\n"
                                           : counted(d.live_count, "allocation") + "\n");
      for (const LeaksView::Site& s : d.sites) {
        out += "    " + pad(format_bytes(s.site.bytes), 11, true) + pad(std::to_string(s.site.count), 8, true) + "  " +
               pad(s.kind == LeaksView::Kind::kGrowing ? "GROWING" : kind_name(s.kind), 9) +
               pad(std::string(api_name(s.site.site.api)), kApiColumn) + s.site.location + "\n";
        out += stack_text(s.site.stack, s.site.named_frame + 1, 10, 5);  // who called it, in one allocation
      }
    }
    if (!p.growth_unmeasured.empty()) {
      out += "  growth per step: " + p.growth_unmeasured + "\n";
      continue;
    }
    if (p.growth.empty()) {
      out += "  growth per step: none over " + std::to_string(p.steps) + " steps\n";
      continue;
    }
    out += "  growing step by step (over " + std::to_string(p.steps) + " steps):\n";
    for (const SiteGrowth& g : p.growth) {
      out += "    " + pad(format_bytes(g.bytes_per_step) + "/step", 16, true) + "  since step " +
             pad(std::to_string(g.first_step), 5) + " rising " + std::to_string(g.steps_rising) + "/" +
             std::to_string(g.intervals) + "  " + std::string(layer_name(g.layer)) + "  " +
             std::string(api_name(g.site.api)) + "  " + g.location + "\n";
      out += stack_text(g.stack, g.named_frame + 1, 10, 5);  // who called it, as for the sites above
    }
  }
  return out;
}

}  // namespace memtrace
