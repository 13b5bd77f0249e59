// memtrace summarize PATH: beside each trace, its summary (.memsum): what every analysis command
// and the HTML page need of the process, in kilobytes. Run on every node of a job by its own
// launcher; the job's folder of summaries is then read as its traces are.
#include <cstdio>
#include <memory>

#include "command.h"
#include "memtrace/base/units.h"
#include "memtrace/engine/summary.h"
#include "memtrace/exports/html_report.h"
#include "memtrace/format/run_folder.h"
#include "options.h"

namespace memtrace::cli {

namespace {

struct SummarizeCli {
  AnalysisCli analysis;
  bool html = false;
  size_t largest = HtmlOptions().largest_allocations;
};

int summarize(SummarizeCli& c) {
  // The options every command reads (their --by, --top, --step; the timeline for timeline,
  // frag and check), checked as the commands check them; with --html, the page's too.
  AnalysisCli& a = c.analysis;
  if (a.by == "category") a.by = "user";  // peak's --by category reads the user sites' analysis
  if (!apply_analysis_cli("summarize", a)) return kExitUsage;
  a.options.timeline = true;
  a.options.owners = true;
  std::vector<AnalysisOptions> options{a.options};
  if (c.html) {
    HtmlOptions html;
    html.largest_allocations = c.largest;
    AnalysisOptions page = html_analysis_options(html);
    page.step_pattern = a.options.step_pattern;
    options.push_back(page);
  }
  std::string error;
  std::vector<std::string> traces = run_folder::find_traces(a.path, error);
  if (traces.empty()) {
    std::fprintf(stderr, "memtrace summarize: %s\n", error.c_str());
    return kExitUsage;
  }
  std::vector<size_t> bytes(traces.size());
  std::vector<std::string> errors(traces.size());
  size_t failed = for_each_on_cores(traces.size(), a.jobs,
                                    [&](size_t i) { return summarize_trace(traces[i], options, bytes[i], errors[i]); });
  if (failed < traces.size()) {
    std::fprintf(stderr, "memtrace summarize: %s\n", errors[failed].c_str());
    return kExitUsage;
  }
  size_t total = 0;
  for (size_t b : bytes) total += b;
  std::fprintf(stderr, "memtrace summarize: %zu summar%s beside the traces in %s (%s, %s each)\n", traces.size(),
               traces.size() == 1 ? "y" : "ies", a.path.c_str(), format_bytes(total).c_str(),
               format_bytes(total / traces.size()).c_str());
  return 0;
}

}  // namespace

Command add_summarize_command(CLI::App& app) {
  auto c = std::make_shared<SummarizeCli>();
  CLI::App* cmd = app.add_subcommand(
      "summarize",
      "Write beside each trace its summary (.memsum, kilobytes): a job's folder of summaries is read by every "
      "analysis command as its traces are, so a node sends its summaries, not its traces");
  add_analysis_options(cmd, c->analysis);
  cmd->get_option("path")->description(
      "An output folder (every trace in it and its folders), one .memtrace file, or a PyTorch memory snapshot");
  cmd->remove_option(cmd->get_option("--json"));
  cmd->add_flag("--html", c->html, "Also what memtrace html needs (every stack at the peak: larger)");
  cmd->add_option("--largest", c->largest, "With --html: as memtrace html --largest (default 20000)")
      ->check(CLI::Range(size_t(1), size_t(1) << 24));
  return {cmd, [c] { return summarize(*c); }};
}

}  // namespace memtrace::cli
