#include <algorithm>
#include <map>

#include "memtrace/analysis/report_render.h"
#include "memtrace/analysis/units.h"
#include "memtrace/analysis/views.h"

namespace memtrace {

namespace {

struct Totals {
  std::map<int32_t, uint64_t> peak;  // by device, summed over processes
  uint64_t leaked = 0;
  uint64_t growth_per_step = 0;
  std::map<std::pair<std::string, std::string>, const SiteTotal*> sites;  // at peak, (api, location)
  std::map<std::pair<std::string, std::string>, uint64_t> site_bytes;
};

std::string site_name(const SiteTotal& s, SiteGrouping grouping) {
  if (grouping != SiteGrouping::kStack) return s.location;
  std::string name;
  for (const FrameView& f : s.stack) name += (name.empty() ? "" : " <- ") + frame_label(f);
  return name;
}

Totals totals(const std::vector<ProcessAnalysis>& processes, SiteGrouping grouping) {
  Totals t;
  for (const ProcessAnalysis& p : processes) {
    for (const DeviceReport& d : p.report.devices) {
      t.peak[d.device] += d.peak_bytes;
      t.leaked += d.live_at_exit_bytes;
      for (const SiteTotal& s : d.peak_sites) {
        auto key = std::make_pair(std::string(api_name(s.site.api)), site_name(s, grouping));
        t.site_bytes[key] += s.bytes;
        t.sites.emplace(key, &s);
      }
    }
    for (const SiteGrowth& g : p.growth) t.growth_per_step += g.bytes_per_step;
  }
  return t;
}

nlohmann::json change(uint64_t base, uint64_t next) {
  return {{"base", base},
          {"new", next},
          {"change", static_cast<int64_t>(next) - static_cast<int64_t>(base)},
          {"percent", base ? 100.0 * (static_cast<double>(next) - static_cast<double>(base)) / static_cast<double>(base)
                           : (next ? 100.0 : 0.0)}};
}

std::string signed_bytes(int64_t v) { return (v < 0 ? "-" : "+") + format_bytes(static_cast<uint64_t>(v < 0 ? -v : v)); }

}  // namespace

nlohmann::json diff_json(const std::vector<ProcessAnalysis>& base, const std::vector<ProcessAnalysis>& next,
                         SiteGrouping grouping) {
  Totals b = totals(base, grouping), n = totals(next, grouping);
  nlohmann::json devices = nlohmann::json::array();
  std::map<int32_t, bool> ordinals;
  for (auto& [d, v] : b.peak) ordinals[d] = true;
  for (auto& [d, v] : n.peak) ordinals[d] = true;
  for (auto& [d, unused] : ordinals) {
    nlohmann::json c = change(b.peak[d], n.peak[d]);
    c["device"] = d;
    devices.push_back(c);
  }
  std::map<std::pair<std::string, std::string>, bool> keys;
  for (auto& [k, v] : b.site_bytes) keys[k] = true;
  for (auto& [k, v] : n.site_bytes) keys[k] = true;
  nlohmann::json sites = nlohmann::json::array();
  for (auto& [k, unused] : keys) {
    uint64_t before = b.site_bytes[k], after = n.site_bytes[k];
    if (before == after) continue;
    nlohmann::json c = change(before, after);
    c["api"] = k.first;
    const SiteTotal* shown = n.sites.count(k) ? n.sites[k] : b.sites[k];
    c["location"] = shown->location;
    c["stack"] = stack_json(shown->stack);
    sites.push_back(std::move(c));
  }
  std::sort(sites.begin(), sites.end(), [](const nlohmann::json& x, const nlohmann::json& y) {
    return x["change"].get<int64_t>() > y["change"].get<int64_t>();
  });
  return {{"peak", devices},
          {"live_at_exit", change(b.leaked, n.leaked)},
          {"growth_per_step", change(b.growth_per_step, n.growth_per_step)},
          {"sites_at_peak", sites}};
}

std::string diff_text(const nlohmann::json& diff) {
  auto line = [](const std::string& what, const nlohmann::json& c) {
    char pct[32];
    std::snprintf(pct, sizeof pct, "%+.1f%%", c["percent"].get<double>());
    return "  " + pad(what, 28) + pad(format_bytes(c["base"]), 11, true) + " -> " + pad(format_bytes(c["new"]), 11, true) +
           "  " + pad(signed_bytes(c["change"]), 12, true) + "  " + pct + "\n";
  };
  std::string out = "memory, base -> new:\n";
  for (const auto& d : diff["peak"]) out += line("peak reserved, device " + std::to_string(d["device"].get<int>()), d);
  out += line("live at exit", diff["live_at_exit"]);
  out += line("growth per step", diff["growth_per_step"]);
  if (diff["sites_at_peak"].empty()) return out + "\nthe sites at the peak hold the same bytes\n";
  out += "\nsites at the peak that changed (largest growth first):\n";
  for (const auto& s : diff["sites_at_peak"]) {
    out += "  " + pad(signed_bytes(s["change"]), 12, true) + "  " + pad(format_bytes(s["base"]), 10, true) + " -> " +
           pad(format_bytes(s["new"]), 10, true) + "  " + s["api"].get<std::string>() + "  " +
           s["location"].get<std::string>() + "\n";
    int shown = 0;
    for (const auto& f : s["stack"]) {
      if (++shown > 4) break;
      out += std::string(16, ' ') + f["function"].get<std::string>() + "\n";
    }
  }
  return out;
}

}  // namespace memtrace
