#include <algorithm>
#include <cstdio>

#include "memtrace/base/units.h"
#include "memtrace/views/report_render.h"
#include "memtrace/views/views.h"

namespace memtrace {

namespace {

std::vector<CheckResult::Site> top_sites(const std::vector<SiteTotal>& sites) {
  std::vector<CheckResult::Site> out;
  for (size_t i = 0; i < sites.size() && i < 5; ++i)
    out.push_back({sites[i].bytes, std::string(api_name(sites[i].site.api)), sites[i].location});
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

std::string limit_line(const CheckResult::Limit& l) {
  if (!l.unmeasured.empty()) return "UNMEASURED  " + l.name + ": " + l.unmeasured;
  auto value = [&](uint64_t bytes, double percent) {
    if (!l.in_percent()) return format_bytes(bytes);
    char text[32];
    std::snprintf(text, sizeof text, "%.1f%%", percent);
    return std::string(text);
  };
  return std::string(l.passed ? "ok    " : "FAILED") + "  " + l.name + ": " + value(l.actual_bytes, l.actual_percent) +
         (l.passed ? " within " : " exceeds ") + value(l.limit_bytes, l.limit_percent) +
         (l.detail.empty() ? "" : "  (" + l.detail + ")");
}

// A site's bytes as its limit counts them: grown by, against a baseline.
std::string site_bytes(const CheckResult::Limit& l, const CheckResult::Site& s) {
  return (l.in_percent() ? "+" : "") + format_bytes(s.bytes);
}

CheckResult::Limit bytes_limit(const char* name, uint64_t limit, uint64_t actual,
                               std::vector<CheckResult::Site> sites) {
  CheckResult::Limit l;
  l.name = name;
  l.limit_bytes = limit;
  l.actual_bytes = actual;
  l.passed = actual <= limit;
  l.sites = std::move(sites);
  return l;
}

}  // namespace

CheckResult check(const std::vector<ProcessAnalysis>& processes, const CheckLimits& limits,
                  const std::vector<ProcessAnalysis>* baseline) {
  CheckResult r;
  auto add = [&](CheckResult::Limit l) {
    if (!l.unmeasured.empty()) l.passed = false;
    r.measured &= l.unmeasured.empty();
    r.passed &= l.passed;
    r.limits.push_back(std::move(l));
  };
  if (limits.max_peak) {
    const DeviceReport* at = nullptr;
    uint64_t peak = largest_peak(processes, &at);
    add(bytes_limit("max-peak", *limits.max_peak, peak,
                    at ? top_sites(at->peak_sites) : std::vector<CheckResult::Site>()));
  }
  if (limits.max_leaked) {
    uint64_t leaked = 0;
    std::vector<SiteTotal> sites;
    // As memtrace leaks counts: with PyTorch's tensors recorded, what they hold (its cache is no leak).
    for (const ProcessAnalysis& p : processes)
      for (const DeviceReport& d : (p.pytorch ? p.allocated : p.report).devices) {
        leaked += d.live_at_exit_bytes;
        sites.insert(sites.end(), d.exit_sites.begin(), d.exit_sites.end());
      }
    std::sort(sites.begin(), sites.end(), [](const SiteTotal& a, const SiteTotal& b) { return a.bytes > b.bytes; });
    add(bytes_limit("max-leaked", *limits.max_leaked, leaked, top_sites(sites)));
  }
  if (limits.max_growth_per_step) {
    uint64_t growth = 0;
    std::vector<CheckResult::Site> sites;
    std::string unmeasured;  // when no process has the steps to measure growth over: the first's reason
    bool measured = false;
    for (const ProcessAnalysis& p : processes) {
      std::string why = growth_unmeasured(p.step_starts.size(), p.step_pattern);
      measured |= why.empty();
      if (unmeasured.empty()) unmeasured = why;
      for (const SiteGrowth& g : p.growth) {
        growth = std::max(growth, g.bytes_per_step);
        if (sites.size() < 5) sites.push_back({g.bytes_per_step, std::string(api_name(g.site.api)), g.location});
      }
    }
    CheckResult::Limit l = bytes_limit("max-growth-per-step", *limits.max_growth_per_step, growth, std::move(sites));
    if (!measured) l.unmeasured = processes.empty() ? "no process to measure" : unmeasured;
    add(std::move(l));
  }
  if (limits.max_regression_percent && baseline) {
    uint64_t peak = largest_peak(processes), base = largest_peak(*baseline);
    CheckResult::Limit l;
    l.name = "max-regression";
    l.limit_percent = *limits.max_regression_percent;
    l.actual_percent = base
                           ? 100.0 * (static_cast<double>(peak) - static_cast<double>(base)) / static_cast<double>(base)
                           : (peak ? 100.0 : 0.0);
    l.passed = l.actual_percent <= l.limit_percent;
    l.detail = "peak " + format_bytes(peak) + " against the baseline's " + format_bytes(base);
    // What grew, as memtrace diff sees it: the sites at the peak that hold more than at the baseline's.
    for (const DiffView::SiteChange& s : diff_view(*baseline, processes, limits.grouping).sites)
      if (s.bytes.change() > 0 && l.sites.size() < 5)
        l.sites.push_back({static_cast<uint64_t>(s.bytes.change()), s.api, s.location});
    add(std::move(l));
  }
  return r;
}

nlohmann::json to_json(const CheckResult& result) {
  nlohmann::json list = nlohmann::json::array();
  for (const CheckResult::Limit& l : result.limits) {
    nlohmann::json sites = nlohmann::json::array();
    for (const CheckResult::Site& s : l.sites)
      sites.push_back({{"bytes", s.bytes}, {"api", s.api}, {"location", s.location}});
    nlohmann::json limit = {{"name", l.name}, {"passed", l.passed}, {"sites", sites}};
    if (!l.unmeasured.empty()) limit["unmeasured"] = l.unmeasured;
    limit["limit"] = l.in_percent() ? nlohmann::json(l.limit_percent) : nlohmann::json(l.limit_bytes);
    limit["actual"] = l.in_percent() ? nlohmann::json(l.actual_percent) : nlohmann::json(l.actual_bytes);
    if (!l.detail.empty()) limit["detail"] = l.detail;
    list.push_back(std::move(limit));
  }
  return {{"passed", result.passed}, {"measured", result.measured}, {"limits", list}};
}

std::string to_text(const CheckResult& result) {
  std::string out;
  for (const CheckResult::Limit& l : result.limits) {
    out += limit_line(l) + "\n";
    if (l.passed || !l.unmeasured.empty()) continue;
    for (const CheckResult::Site& s : l.sites)
      out += "          " + pad(site_bytes(l, s), 11, true) + "  " + s.api + "  " + s.location + "\n";
  }
  out += result.passed     ? "memtrace check: every limit holds\n"
         : result.measured ? "memtrace check: a limit is broken\n"
                           : "memtrace check: a limit could not be measured on this run\n";
  return out;
}

std::string check_junit(const CheckResult& result) {
  size_t failures = 0, errors = 0;  // a limit that could not be measured is an error, not a failure
  for (const CheckResult::Limit& l : result.limits) {
    errors += l.unmeasured.empty() ? 0 : 1;
    failures += l.passed || !l.unmeasured.empty() ? 0 : 1;
  }
  std::string out =
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n  <testsuite name=\"memtrace check\" tests=\"" +
      std::to_string(result.limits.size()) + "\" failures=\"" + std::to_string(failures) + "\" errors=\"" +
      std::to_string(errors) + "\">\n";
  for (const CheckResult::Limit& l : result.limits) {
    out += "    <testcase classname=\"memtrace\" name=\"" + escape_xml(l.name) + "\"";
    if (l.passed) {
      out += "/>\n";
      continue;
    }
    if (!l.unmeasured.empty()) {
      out += ">\n      <error message=\"" + escape_xml(limit_line(l)) + "\"/>\n    </testcase>\n";
      continue;
    }
    std::string detail;
    for (const CheckResult::Site& s : l.sites) detail += site_bytes(l, s) + "  " + s.api + "  " + s.location + "\n";
    out += ">\n      <failure message=\"" + escape_xml(limit_line(l)) + "\">" + escape_xml(detail) +
           "</failure>\n    </testcase>\n";
  }
  return out + "  </testsuite>\n</testsuites>\n";
}

}  // namespace memtrace
