#include <algorithm>

#include "memtrace/base/units.h"
#include "memtrace/views/report_render.h"
#include "memtrace/views/views.h"

namespace memtrace {

namespace {

// The device layer at the reserved peak: what was reserved then, site by site, and what lay
// outside it as one more row.
DeviceReport device_layer_of(const DeviceReport& reserved) {
  DeviceReport d = reserved;
  d.peak_bytes = reserved.device_at_peak_bytes();
  auto add = [&](Api api, uint64_t bytes, const std::string& what) {
    if (!bytes) return;
    SiteTotal outside;
    outside.site.api = api;
    outside.bytes = bytes;
    outside.location = what;
    auto at = std::find_if(d.peak_sites.begin(), d.peak_sites.end(),
                           [&](const SiteTotal& s) { return s.bytes < outside.bytes; });
    d.peak_sites.insert(at, std::move(outside));
  };
  const OutsideParts& parts = reserved.outside_parts_at_peak;
  add(Api::kDevicePoolHeld, parts.pools_held, "kept by stream-ordered pools beyond their allocations");
  add(Api::kDeviceGraphReserved, parts.graphs_reserved, "held by CUDA graphs for their memory nodes");
  add(Api::kDeviceOtherProcesses, parts.other_processes, "held by other processes on the device (NVML)");
  add(Api::kDeviceUsed, reserved.outside_reserved_at_peak_bytes - parts.total(),
      std::string("outside the reserved layer: ") + parts.rest());
  return d;
}

}  // namespace

PeakView peak_view(const std::vector<ProcessAnalysis>& processes, const PeakOptions& options) {
  PeakView view;
  view.by_category = options.by_category;
  view.by_owner = options.by_owner;
  // Categories are the allocated layer's: --by category looks there whatever --layer says.
  view.layer = options.by_category ? Layer::kAllocated : options.layer;
  uint64_t sum = 0, max = 0;
  size_t with_peak = 0;
  for (const ProcessAnalysis& p : processes) {
    const ProcessReport& r = view.layer == Layer::kAllocated ? p.allocated : p.report;
    PeakView::Process process;
    process.id = process_id(p.report);
    process.steps = p.step_starts.size();
    process.layer_recorded = view.layer == Layer::kReserved || (view.layer == Layer::kAllocated && p.has_allocated);
    process.categories_known = p.categories_known;
    process.pytorch = p.pytorch && p.has_allocated;
    uint64_t process_peak = 0;
    for (const DeviceReport& d : r.devices) {
      if (options.device && d.device != *options.device) continue;
      if (view.layer == Layer::kDevice && !d.device_samples) continue;
      process.layer_recorded = true;
      std::optional<TorchCounters> counters;
      for (const TorchCounters& c : p.report.pytorch_counters)
        if (c.device == d.device && c.when == "exit") counters = c;
      process.devices.push_back({view.layer == Layer::kDevice ? device_layer_of(d) : d,
                                 p.step_starts.empty() ? std::nullopt : std::optional<uint64_t>(d.peak_step),
                                 std::move(counters)});
      process_peak += process.devices.back().report.peak_bytes;
    }
    if (!process.devices.empty()) ++with_peak;
    sum += process_peak;
    max = std::max(max, process_peak);
    view.processes.push_back(std::move(process));
  }
  if (processes.size() > 1) {
    double mean = with_peak ? static_cast<double>(sum) / static_cast<double>(with_peak) : 0.0;
    view.all = PeakView::AllProcesses{sum, max, mean, mean > 0 ? static_cast<double>(max) / mean : 1.0};
  }
  return view;
}

nlohmann::json to_json(const PeakView& view) {
  nlohmann::json out = {{"layer", std::string(layer_name(view.layer))}, {"processes", nlohmann::json::array()}};
  for (const PeakView::Process& p : view.processes) {
    nlohmann::json devices = nlohmann::json::array();
    for (const PeakView::Device& device : p.devices) {
      const DeviceReport& d = device.report;
      nlohmann::json sites = nlohmann::json::array();
      for (const SiteTotal& s : d.peak_sites) {
        nlohmann::json site = site_json(s);
        site["share"] = d.peak_bytes ? static_cast<double>(s.bytes) / static_cast<double>(d.peak_bytes) : 0.0;
        sites.push_back(std::move(site));
      }
      nlohmann::json categories = nlohmann::json::array();
      for (const CategoryTotal& c : d.peak_categories)
        categories.push_back(
            {{"category", std::string(category_name(c.category))},
             {"bytes", c.bytes},
             {"count", c.count},
             {"share", d.peak_bytes ? static_cast<double>(c.bytes) / static_cast<double>(d.peak_bytes) : 0.0}});
      nlohmann::json json = device_json(d);
      if (view.layer == Layer::kAllocated) json["categories"] = categories;
      if (view.by_owner) json.update(owners_json(d));
      if (device.pytorch_counters) json["pytorch_counters"] = torch_counters_json(*device.pytorch_counters);
      json.update({{"peak_bytes", d.peak_bytes},
                   {"peak_time_ns", d.peak_time_ns},
                   {"peak_step", device.step ? nlohmann::json(*device.step) : nlohmann::json(nullptr)},
                   {"peak_phase", d.peak_phase},
                   {"sites", sites}});
      devices.push_back(std::move(json));
    }
    nlohmann::json process = process_json(p.id);
    process.update({{"steps", p.steps},
                    {"layer_recorded", p.layer_recorded},
                    {"categories_known", p.categories_known},
                    {"counts", view.layer == Layer::kAllocated && p.pytorch ? "requested_bytes" : "bytes"},
                    {"devices", devices}});
    out["processes"].push_back(std::move(process));
  }
  if (view.all)
    out["all_processes"] = {{"sum_of_peaks_bytes", view.all->sum_of_peaks},
                            {"largest_peak_bytes", view.all->largest_peak},
                            {"mean_peak_bytes", view.all->mean_peak},
                            {"imbalance", view.all->imbalance}};
  return out;
}

std::string to_text(const PeakView& view) {
  std::string out, layer(layer_name(view.layer));
  for (const PeakView::Process& p : view.processes) {
    if (!out.empty()) out += "\n";
    out += process_heading(p.id);
    if (!p.layer_recorded) {
      out += view.layer == Layer::kDevice
                 ? "  the device layer was not sampled (an import, or a trace from an older memtrace)\n"
                 : "  the allocated layer was not recorded (no PyTorch allocator events, and no allocator described "
                   "its regions through NVTX)\n";
      continue;
    }
    if (view.by_category && !p.categories_known)
      out += "  categories are not known: they come from PyTorch programs run under memtrace (its Python shim)\n";
    if (p.devices.empty()) out += "  no device memory in the " + layer + " layer\n";
    if (view.layer == Layer::kAllocated && p.pytorch) out += std::string("  ") + kPyTorchAllocatedLayer + "\n";
    for (const PeakView::Device& device : p.devices) {
      const DeviceReport& d = device.report;
      out += "  device " + std::to_string(d.device) + ": peak " + layer + " " + format_bytes(d.peak_bytes) + " at " +
             format_duration_ns(d.peak_time_ns);
      if (device.step) out += ", step " + std::to_string(*device.step);
      if (!d.peak_phase.empty()) out += ", in " + d.peak_phase;
      out += "\n";
      if (device.pytorch_counters && view.layer != Layer::kDevice)
        out +=
            torch_counters_text(*device.pytorch_counters, 4, view.layer,
                                view.layer == Layer::kReserved ? std::optional<uint64_t>(d.peak_bytes) : std::nullopt);
      if (view.by_owner) {
        out += "    who held the device then:\n" + owners_text(d, 4);
        continue;
      }
      if (view.by_category) {
        out += "    " + pad("bytes", 11, true) + pad("share", 8, true) + pad("count", 8, true) + "  category\n";
        for (const CategoryTotal& c : d.peak_categories)
          out += "    " + pad(format_bytes(c.bytes), 11, true) + pad(percent(c.bytes, d.peak_bytes), 8, true) +
                 pad(std::to_string(c.count), 8, true) + "  " + std::string(category_name(c.category)) + "\n";
        continue;
      }
      if (d.peak_sites.empty()) continue;
      out += "    " + pad("bytes", 11, true) + pad("share", 8, true) + pad("count", 8, true) + "  " +
             pad("api", kApiColumn) + "allocated at\n";
      for (const SiteTotal& s : d.peak_sites)
        out += "    " + pad(format_bytes(s.bytes), 11, true) + pad(percent(s.bytes, d.peak_bytes), 8, true) +
               pad(std::to_string(s.count), 8, true) + "  " + pad(std::string(api_name(s.site.api)), kApiColumn) +
               s.location + "\n";
    }
  }
  if (view.all) {
    char imbalance[32];
    std::snprintf(imbalance, sizeof imbalance, "%.2f", view.all->imbalance);
    out += "\nall processes: peaks add up to " + format_bytes(view.all->sum_of_peaks) + "; largest " +
           format_bytes(view.all->largest_peak) + ", mean " + format_bytes(static_cast<uint64_t>(view.all->mean_peak)) +
           ", imbalance " + imbalance + " (largest / mean)\n";
  }
  return out;
}

}  // namespace memtrace
