#include <algorithm>
#include <cstdio>

#include "memtrace/analysis/report_render.h"
#include "memtrace/analysis/units.h"
#include "memtrace/analysis/views.h"

namespace memtrace {

namespace {

nlohmann::json top_sites(const std::vector<SiteTotal>& sites) {
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < sites.size() && i < 5; ++i)
    out.push_back({{"bytes", sites[i].bytes}, {"api", std::string(api_name(sites[i].site.api))}, {"location", sites[i].location}});
  return out;
}

uint64_t largest_peak(const std::vector<ProcessAnalysis>& processes, const DeviceReport** where = nullptr) {
  uint64_t most = 0;
  for (const ProcessAnalysis& p : processes)
    for (const DeviceReport& d : p.report.devices)
      if (d.peak_bytes >= most) {
        most = d.peak_bytes;
        if (where) *where = &d;
      }
  return most;
}

std::string limit_line(const nlohmann::json& l) {
  const std::string name = l["name"];
  auto value = [&](const nlohmann::json& v) {
    return name == "max-regression" ? [&] {
      char b[32];
      std::snprintf(b, sizeof b, "%.1f%%", v.get<double>());
      return std::string(b);
    }()
                                    : format_bytes(v.get<uint64_t>());
  };
  return std::string(l["passed"].get<bool>() ? "ok    " : "FAILED") + "  " + name + ": " + value(l["actual"]) +
         (l["passed"].get<bool>() ? " within " : " exceeds ") + value(l["limit"]) +
         (l.contains("detail") ? "  (" + l["detail"].get<std::string>() + ")" : "");
}

}  // namespace

CheckResult check(const std::vector<ProcessAnalysis>& processes, const CheckLimits& limits,
                  const std::vector<ProcessAnalysis>* baseline) {
  CheckResult r;
  nlohmann::json list = nlohmann::json::array();
  auto add = [&](nlohmann::json l) {
    r.passed &= l["passed"].get<bool>();
    list.push_back(std::move(l));
  };
  if (limits.max_peak) {
    const DeviceReport* at = nullptr;
    uint64_t peak = largest_peak(processes, &at);
    add({{"name", "max-peak"}, {"limit", *limits.max_peak}, {"actual", peak}, {"passed", peak <= *limits.max_peak},
         {"sites", at ? top_sites(at->peak_sites) : nlohmann::json::array()}});
  }
  if (limits.max_leaked) {
    uint64_t leaked = 0;
    std::vector<SiteTotal> sites;
    for (const ProcessAnalysis& p : processes)
      for (const DeviceReport& d : p.report.devices) {
        leaked += d.live_at_exit_bytes;
        sites.insert(sites.end(), d.exit_sites.begin(), d.exit_sites.end());
      }
    std::sort(sites.begin(), sites.end(), [](const SiteTotal& a, const SiteTotal& b) { return a.bytes > b.bytes; });
    add({{"name", "max-leaked"}, {"limit", *limits.max_leaked}, {"actual", leaked}, {"passed", leaked <= *limits.max_leaked},
         {"sites", top_sites(sites)}});
  }
  if (limits.max_growth_per_step) {
    uint64_t growth = 0;
    nlohmann::json sites = nlohmann::json::array();
    for (const ProcessAnalysis& p : processes)
      for (const SiteGrowth& g : p.growth) {
        growth = std::max(growth, g.bytes_per_step);
        if (sites.size() < 5)
          sites.push_back({{"bytes", g.bytes_per_step}, {"api", std::string(api_name(g.site.api))}, {"location", g.location}});
      }
    add({{"name", "max-growth-per-step"}, {"limit", *limits.max_growth_per_step}, {"actual", growth},
         {"passed", growth <= *limits.max_growth_per_step}, {"sites", sites}});
  }
  if (limits.max_regression_percent && baseline) {
    const DeviceReport* at = nullptr;
    uint64_t peak = largest_peak(processes, &at), base = largest_peak(*baseline);
    double percent = base ? 100.0 * (static_cast<double>(peak) - static_cast<double>(base)) / static_cast<double>(base)
                          : (peak ? 100.0 : 0.0);
    add({{"name", "max-regression"}, {"limit", *limits.max_regression_percent}, {"actual", percent},
         {"passed", percent <= *limits.max_regression_percent},
         {"detail", "peak " + format_bytes(peak) + " against the baseline's " + format_bytes(base)},
         {"sites", at ? top_sites(at->peak_sites) : nlohmann::json::array()}});
  }
  r.json = {{"passed", r.passed}, {"limits", list}};
  return r;
}

std::string check_text(const CheckResult& result) {
  std::string out;
  for (const auto& l : result.json["limits"]) {
    out += limit_line(l) + "\n";
    if (l["passed"].get<bool>()) continue;
    for (const auto& s : l["sites"])
      out += "          " + pad(format_bytes(s["bytes"]), 11, true) + "  " + s["api"].get<std::string>() + "  " +
             s["location"].get<std::string>() + "\n";
  }
  out += result.passed ? "memtrace check: every limit holds\n" : "memtrace check: a limit is broken\n";
  return out;
}

std::string check_junit(const CheckResult& result) {
  const auto& limits = result.json["limits"];
  size_t failures = 0;
  for (const auto& l : limits) failures += l["passed"].get<bool>() ? 0 : 1;
  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n  <testsuite name=\"memtrace check\" tests=\"" +
                    std::to_string(limits.size()) + "\" failures=\"" + std::to_string(failures) + "\" errors=\"0\">\n";
  for (const auto& l : limits) {
    out += "    <testcase classname=\"memtrace\" name=\"" + escape_xml(l["name"]) + "\"";
    if (l["passed"].get<bool>()) {
      out += "/>\n";
      continue;
    }
    std::string detail;
    for (const auto& s : l["sites"])
      detail += format_bytes(s["bytes"]) + "  " + s["api"].get<std::string>() + "  " + s["location"].get<std::string>() + "\n";
    out += ">\n      <failure message=\"" + escape_xml(limit_line(l)) + "\">" + escape_xml(detail) + "</failure>\n    </testcase>\n";
  }
  return out + "  </testsuite>\n</testsuites>\n";
}

}  // namespace memtrace
