// memtrace report PATH: per process, events by API, per device the peak, when, what was live at
// exit, and the largest sites at the peak.
#include <memory>

#include "command.h"
#include "memtrace/views/report_render.h"
#include "options.h"

namespace memtrace::cli {

Command add_report_command(CLI::App& app) {
  auto a = std::make_shared<AnalysisCli>();
  CLI::App* cmd = app.add_subcommand("report", "Summarize traces: events, peaks, largest sites");
  cmd->add_option("path", a->path, "An output folder or one .memtrace file")->required();
  cmd->add_flag("--json", a->json, "Print JSON instead of text");
  add_by_option(cmd, a->by);
  cmd->add_flag("--keep-cuda-frames", a->options.keep_cuda_frames,
                "Show frames inside the CUDA libraries at the top of stacks");
  return {cmd, [a] {
            std::vector<ProcessAnalysis> analyses;
            if (!load_analyses("report", *a, analyses)) return 1;
            std::vector<ProcessReport> processes;
            for (ProcessAnalysis& p : analyses) processes.push_back(std::move(p.report));
            if (a->json)
              print(true, report_json(processes), "");
            else
              print(false, nullptr, report_text(processes));
            return 0;
          }};
}

}  // namespace memtrace::cli
