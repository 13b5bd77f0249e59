// memtrace leaks PATH: what was still live at the end, and what grew step by step.
#include <memory>

#include "command.h"
#include "options.h"

namespace memtrace::cli {

Command add_leaks_command(CLI::App& app) {
  auto a = std::make_shared<AnalysisCli>();
  CLI::App* cmd = app.add_subcommand("leaks", "What was still live at the end, and what grew step by step");
  add_analysis_options(cmd, *a);
  a->options.fragmentation = a->options.categories = false;  // what leaks does not show
  return {cmd, [a] { return analyze_and_show("leaks", *a, leaks_view); }};
}

}  // namespace memtrace::cli
