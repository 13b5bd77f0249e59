// memtrace report PATH: per process, events by API, per device the peak, when, what was live at
// exit, and the largest sites at the peak.
#include <memory>

#include "command.h"
#include "memtrace/views/views.h"
#include "options.h"

namespace memtrace::cli {

Command add_report_command(CLI::App& app) {
  auto a = std::make_shared<AnalysisCli>();
  a->options.fragmentation = a->options.categories = false;  // what report does not show
  a->options.owners = true;                                  // its first table: who held each device
  CLI::App* cmd = app.add_subcommand("report", "Summarize traces: events, peaks, largest sites");
  cmd->add_option("path", a->path, kRunPathHelp)->required();
  cmd->add_flag("--json", a->json, "Print JSON instead of text");
  add_by_option(cmd, a->by);
  add_jobs_option(cmd, a->jobs);
  cmd->add_flag("--keep-cuda-frames", a->options.keep_cuda_frames,
                "Show frames inside the CUDA libraries at the top of stacks");
  return {cmd, [a] {
            return analyze_and_show("report", *a,
                                    [](std::vector<ProcessAnalysis>& p) { return report_view(std::move(p)); });
          }};
}

}  // namespace memtrace::cli
