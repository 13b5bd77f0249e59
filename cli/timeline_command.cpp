// memtrace timeline PATH: memory over time per device and layer; CSV and SVG on request.
#include <cstdio>
#include <memory>
#include <tuple>

#include "command.h"
#include "memtrace/base/units.h"
#include "memtrace/views/report_render.h"
#include "memtrace/views/views.h"
#include "options.h"

namespace memtrace::cli {

namespace {

struct TimelineCli {
  AnalysisCli analysis;
  size_t width = 72;
  std::string csv, svg, from, to;
};

int timeline(TimelineCli& c) {
  TimeWindow window;
  for (auto [text, bound, flag] : {std::tuple{&c.from, &window.from, "--from"}, {&c.to, &window.to, "--to"}}) {
    if (text->empty()) continue;
    auto parsed = parse_time_bound(*text);
    if (!parsed) {
      std::fprintf(stderr, "memtrace timeline: %s: '%s' is not a time or a step (try 1.5s, 250ms or step:3)\n", flag,
                   text->c_str());
      return kExitUsage;
    }
    *bound = *parsed;
  }
  c.analysis.options.timeline = true;
  c.analysis.options.fragmentation = c.analysis.options.categories = false;  // what timeline does not show
  std::vector<ProcessAnalysis> processes;
  if (!load_analyses("timeline", c.analysis, processes)) return kExitUsage;
  // A window outside the run is a mistake, not an empty chart: say the run's range.
  for (auto [bound, flag, text] : {std::tuple{&window.from, "--from", &c.from}, {&window.to, "--to", &c.to}}) {
    for (const ProcessAnalysis& p : processes) {
      if (bound->t_ns && *bound->t_ns > p.report.end_time_ns) {
        std::fprintf(stderr, "memtrace timeline: %s %s: the run (%s) lasted %s\n", flag, text->c_str(),
                     process_label(process_id(p.report)).c_str(), format_duration_ns(p.report.end_time_ns).c_str());
        return kExitUsage;
      }
      if (bound->step && *bound->step >= p.step_starts.size()) {
        std::fprintf(
            stderr, "memtrace timeline: %s %s: the run (%s) has %s\n", flag, text->c_str(),
            process_label(process_id(p.report)).c_str(),
            p.step_starts.empty() ? "no steps" : ("steps 0 to " + std::to_string(p.step_starts.size() - 1)).c_str());
        return kExitUsage;
      }
    }
  }
  TimelineView view = timeline_view(processes, window, c.analysis.by == "owner");
  if (!c.csv.empty() && !write_report_file("timeline", c.csv, to_csv(view))) return 1;
  if (!c.svg.empty() && !write_report_file("timeline", c.svg, to_svg(view))) return 1;
  if (c.analysis.json)
    print(true, to_json(view), "");
  else
    print(false, nullptr, to_text(view, c.width));
  return 0;
}

}  // namespace

Command add_timeline_command(CLI::App& app) {
  auto c = std::make_shared<TimelineCli>();
  CLI::App* cmd = app.add_subcommand("timeline", "Memory over time per device and layer");
  add_analysis_options(cmd, c->analysis, false);
  cmd->add_option("--by", c->analysis.by,
                  "layer: each device's layers (default); owner: each owner's reserved bytes (the library whose "
                  "code called CUDA: NCCL, cuBLAS, PyTorch's allocator, the program)")
      ->check(CLI::IsMember({"layer", "owner"}));
  cmd->add_option("--width", c->width, "Columns of the terminal chart (default 72)")->check(CLI::Range(10, 1000));
  cmd->add_option("--from", c->from,
                  "Start at this time since the program started (1.5s, 250ms) or at a step's start (step:3); "
                  "default: where memory first changed");
  cmd->add_option("--to", c->to, "End at this time, or at a step's end (step:5); default: where memory last changed");
  cmd->add_option("--csv", c->csv, "Also write the series as CSV to this file (replaced if there)");
  cmd->add_option("--svg", c->svg,
                  "Also write a standalone SVG chart, phases shaded, to this file (replaced if there)");
  return {cmd, [c] { return timeline(*c); }};
}

}  // namespace memtrace::cli
