// memtrace timeline PATH: memory over time per device and layer; CSV and SVG on request.
#include <memory>

#include "command.h"
#include "memtrace/analysis/views.h"
#include "options.h"

namespace memtrace::cli {

namespace {

struct TimelineCli {
  AnalysisCli analysis;
  size_t width = 72;
  std::string csv, svg;
};

int timeline(TimelineCli& c) {
  c.analysis.options.timeline = true;
  std::vector<ProcessAnalysis> processes;
  if (!load_analyses("timeline", c.analysis, processes)) return 1;
  if (!c.csv.empty() && !write_report_file("timeline", c.csv, timeline_csv(processes))) return 1;
  if (!c.svg.empty() && !write_report_file("timeline", c.svg, timeline_svg(processes))) return 1;
  if (c.analysis.json)
    print(true, timeline_json(processes), "");
  else
    print(false, nullptr, timeline_text(processes, c.width));
  return 0;
}

}  // namespace

Command add_timeline_command(CLI::App& app) {
  auto c = std::make_shared<TimelineCli>();
  CLI::App* cmd = app.add_subcommand("timeline", "Memory over time per device and layer");
  add_analysis_options(cmd, c->analysis, false);
  cmd->add_option("--width", c->width, "Columns of the terminal chart (default 72)")->check(CLI::Range(10, 1000));
  cmd->add_option("--csv", c->csv, "Also write the series as CSV to this file (replaced if there)");
  cmd->add_option("--svg", c->svg,
                  "Also write a standalone SVG chart, phases shaded, to this file (replaced if there)");
  return {cmd, [c] { return timeline(*c); }};
}

}  // namespace memtrace::cli
