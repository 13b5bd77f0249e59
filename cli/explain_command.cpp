// memtrace explain PATH: what a trace measured, held against the estimate.
#include <cstdio>
#include <memory>

#include "command.h"
#include "estimate_options.h"
#include "memtrace/estimate/explain.h"
#include "options.h"

namespace memtrace::cli {

namespace {

struct ExplainCli {
  std::string path;
  unsigned jobs = 0;
  EstimateCli estimate;
};

int explain_run(ExplainCli& c) {
  Estimate result;
  if (!estimate_from("explain", c.estimate, result)) return kExitUsage;
  AnalysisCli traces;
  traces.path = c.path;
  traces.jobs = c.jobs;
  std::vector<ProcessAnalysis> analyses;
  if (!load_analyses("explain", traces, analyses)) return kExitUsage;
  Explanation x = explain(result, analyses);
  show(c.estimate.json, x);
  return 0;
}

}  // namespace

Command add_explain_command(CLI::App& app) {
  auto c = std::make_shared<ExplainCli>();
  CLI::App* cmd = app.add_subcommand("explain", "Hold what a trace measured against the estimate");
  cmd->add_option("path", c->path, kRunPathHelp)->required();
  add_jobs_option(cmd, c->jobs);
  add_estimate_options(cmd, c->estimate);
  return {cmd, [c] { return explain_run(*c); }};
}

}  // namespace memtrace::cli
