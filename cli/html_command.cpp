// memtrace html PATH [-o FILE]: one self-contained page with the run's memory over time, the
// largest allocations, the flame graph at the peak, the top sites, growth, fragmentation and
// out-of-memory failures, a tab per process.
#include <cstdio>
#include <memory>

#include "command.h"
#include "memtrace/exports/html_report.h"
#include "options.h"

namespace memtrace::cli {

namespace {

struct HtmlCli {
  AnalysisCli analysis;
  std::string output = "memtrace-report.html";
  size_t largest = HtmlOptions().largest_allocations;
};

int write_html(HtmlCli& c) {
  if (!html_report_available()) {
    std::fprintf(stderr,
                 "memtrace html: this memtrace was built without uPlot, which every page carries: run scripts/setup "
                 "(npm ci in analysis/exports/html) and build again\n");
    return 1;
  }
  HtmlOptions options;
  options.largest_allocations = c.largest;
  c.analysis.options = html_analysis_options(options);
  c.analysis.by = "stack";  // the flame graph's stacks; the sites are named as everywhere else
  std::vector<ProcessAnalysis> processes;
  if (!load_analyses("html", c.analysis, processes)) return kExitUsage;
  if (!write_report_file("html", c.output, html_page(html_data(processes)))) return 1;
  if (c.output != "-") std::fprintf(stderr, "memtrace html: wrote %s\n", c.output.c_str());
  return 0;
}

}  // namespace

Command add_html_command(CLI::App& app) {
  auto c = std::make_shared<HtmlCli>();
  CLI::App* cmd = app.add_subcommand("html", "Write one HTML page to explore the run in a browser (fetches nothing)");
  cmd->add_option("path", c->analysis.path, kRunPathHelp)->required();
  cmd->add_option("-o,--output", c->output, "The page to write (default: memtrace-report.html; - for standard output)");
  cmd->add_option("--largest", c->largest,
                  "How many of the largest allocations the page draws one by one (default 20000; the rest are in "
                  "the totals)")
      ->check(CLI::Range(size_t(0), size_t(1) << 24));
  cmd->add_option("--step", c->analysis.step,
                  "A regular expression the whole name of a step's NVTX mark or range matches (default: memtrace's "
                  "and PyTorch's optimizer steps)");
  add_jobs_option(cmd, c->analysis.jobs);
  return {cmd, [c] { return write_html(*c); }};
}

}  // namespace memtrace::cli
