// memtrace leaks PATH: what was still live at the end, and what grew step by step.
#include <memory>

#include "command.h"
#include "memtrace/analysis/views.h"
#include "options.h"

namespace memtrace::cli {

Command add_leaks_command(CLI::App& app) {
  auto a = std::make_shared<AnalysisCli>();
  CLI::App* cmd = app.add_subcommand("leaks", "What was still live at the end, and what grew step by step");
  add_analysis_options(cmd, *a);
  return {cmd, [a] {
            std::vector<ProcessAnalysis> processes;
            if (!load_analyses("leaks", *a, processes)) return 1;
            LeaksView view = leaks_view(processes);
            print(a->json, to_json(view), to_text(view));
            return 0;
          }};
}

}  // namespace memtrace::cli
