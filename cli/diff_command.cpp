// memtrace diff BASE NEW: two runs compared, peaks, leaks and sites, what grew.
#include <memory>

#include "command.h"
#include "options.h"

namespace memtrace::cli {

namespace {

struct DiffCli {
  AnalysisCli base, next;
};

int diff(DiffCli& c) {
  c.base.by = c.next.by;
  c.base.step = c.next.step;
  c.base.jobs = c.next.jobs;
  c.base.options.categories = c.next.options.categories = false;  // what diff does not compare
  std::vector<ProcessAnalysis> base, next;
  if (!load_analyses("diff", c.base, base) || !load_analyses("diff", c.next, next)) return kExitUsage;
  show(c.next.json, diff_view(base, next, c.next.options.grouping));
  return 0;
}

}  // namespace

Command add_diff_command(CLI::App& app) {
  auto c = std::make_shared<DiffCli>();
  CLI::App* cmd = app.add_subcommand("diff", "Compare two runs: peaks, leaks and sites, what grew");
  cmd->add_option("base", c->base.path, std::string("The baseline. ") + kRunPathHelp)->required();
  cmd->add_option("new", c->next.path, "The run to compare with it")->required();
  cmd->add_flag("--json", c->next.json, "Print JSON instead of text");
  add_by_option(cmd, c->next.by);
  cmd->add_option("--step", c->next.step, "Regular expression naming the step range or mark");
  add_jobs_option(cmd, c->next.jobs);
  return {cmd, [c] { return diff(*c); }};
}

}  // namespace memtrace::cli
