// memtrace check PATH: for CI, 0 when the run is within every limit, 1 when one is broken, 2 for
// bad use, an unreadable trace, or a limit the run gives nothing to measure (growth without steps).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <tuple>

#include "command.h"
#include "memtrace/base/units.h"
#include "memtrace/views/views.h"
#include "options.h"

namespace memtrace::cli {

namespace {

struct CheckCli {
  AnalysisCli analysis;
  std::string max_peak, max_leaked, max_growth, baseline, junit, max_regression;
  CLI::Option* regression_option = nullptr;
};

// "5", "5%", "2.5 %", "-10%": a percent; nothing when TEXT is not one.
std::optional<double> parse_percent(std::string text) {
  while (!text.empty() && (text.back() == '%' || text.back() == ' ')) text.pop_back();
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  if (*end != '\0' || !std::isfinite(value) || value < -100) return std::nullopt;
  return value;
}

// What CI reads when the run cannot be read at all: one test in error, not an empty report
// ("no tests" reads as a pass in most CI systems).
CheckResult unreadable(const std::string& path, const std::string& why) {
  CheckResult result;
  result.passed = result.measured = false;
  CheckResult::Limit input;
  input.name = "read " + path;
  input.passed = false;
  input.unmeasured = why;
  result.limits.push_back(std::move(input));
  return result;
}

int check_run(CheckCli& c) {
  CheckLimits limits;
  for (auto [text, target, flag] : {std::tuple{&c.max_peak, &limits.max_peak, "--max-peak"},
                                    {&c.max_leaked, &limits.max_leaked, "--max-leaked"},
                                    {&c.max_growth, &limits.max_growth_per_step, "--max-growth-per-step"}}) {
    if (text->empty()) continue;
    auto bytes = parse_size(*text);
    if (!bytes) {
      std::fprintf(stderr, "memtrace check: %s: '%s' is not a size (try 4GiB)\n", flag, text->c_str());
      return kExitUsage;
    }
    *target = bytes;
  }
  const bool regression = c.regression_option->count() > 0;
  if (regression && c.baseline.empty()) {
    std::fprintf(stderr, "memtrace check: --max-regression needs --baseline\n");
    return kExitUsage;
  }
  if (!c.baseline.empty() && !regression) {
    std::fprintf(stderr, "memtrace check: --baseline needs --max-regression PERCENT\n");
    return kExitUsage;
  }
  if (regression) {
    limits.max_regression_percent = parse_percent(c.max_regression);
    if (!limits.max_regression_percent) {
      std::fprintf(stderr, "memtrace check: --max-regression: '%s' is not a percent (try 5 or 5%%)\n",
                   c.max_regression.c_str());
      return kExitUsage;
    }
  }
  if (!limits.max_peak && !limits.max_leaked && !limits.max_growth_per_step && !limits.max_regression_percent) {
    std::fprintf(stderr,
                 "memtrace check: give at least one limit (--max-peak, --max-leaked, "
                 "--max-growth-per-step, --baseline with --max-regression)\n");
    return kExitUsage;
  }
  limits.grouping = grouping_named(c.analysis.by);
  std::vector<ProcessAnalysis> processes, baseline;
  std::string why;
  auto cannot_read = [&](const std::string& path) {
    if (!c.junit.empty()) write_report_file("check", c.junit, check_junit(unreadable(path, why)));
    return kExitUsage;
  };
  if (!load_analyses("check", c.analysis, processes, &why)) return cannot_read(c.analysis.path);
  if (!c.baseline.empty()) {
    AnalysisCli b = c.analysis;
    b.path = c.baseline;
    if (!load_analyses("check", b, baseline, &why)) return cannot_read(c.baseline);
  }
  CheckResult result = check(processes, limits, c.baseline.empty() ? nullptr : &baseline);
  show(c.analysis.json, result);  // the verdict first, whatever happens to the report file
  if (!c.junit.empty() && !write_report_file("check", c.junit, check_junit(result))) return kExitUsage;
  return result.passed ? 0 : result.measured ? 1 : kExitUsage;  // a limit with nothing to measure is not met
}

}  // namespace

Command add_check_command(CLI::App& app) {
  auto c = std::make_shared<CheckCli>();
  CLI::App* cmd = app.add_subcommand(
      "check", "For CI: exit 0 when the run is within every limit, 1 when one is broken, 2 for bad use");
  add_analysis_options(cmd, c->analysis, false);
  c->analysis.options.fragmentation = c->analysis.options.categories = false;  // what check does not measure
  add_by_option(cmd, c->analysis.by);  // which sites growth per step is measured over
  cmd->add_option("--max-peak", c->max_peak, "Largest peak of reserved memory on any device, e.g. 70GiB");
  cmd->add_option("--max-leaked", c->max_leaked, "Device memory still live at the end, all processes");
  cmd->add_option("--max-growth-per-step", c->max_growth, "Growth per step of any one site");
  cmd->add_option("--baseline", c->baseline, "A run to compare with (what PATH can be)");
  c->regression_option = cmd->add_option("--max-regression", c->max_regression,
                                         "Peak growth over --baseline allowed, in percent (5 or 5%)");
  cmd->add_option("--junit", c->junit, "Also write a JUnit XML report to this file (replaced if there)");
  return {cmd, [c] { return check_run(*c); }};
}

}  // namespace memtrace::cli
