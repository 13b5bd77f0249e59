// memtrace frag PATH: free memory inside the allocator's segments, at the peak and each OOM.
#include <memory>

#include "command.h"
#include "memtrace/analysis/views.h"
#include "options.h"

namespace memtrace::cli {

Command add_frag_command(CLI::App& app) {
  auto a = std::make_shared<AnalysisCli>();
  CLI::App* cmd = app.add_subcommand("frag",
                                     "Free memory inside the allocator's segments: fragmentation at the "
                                     "peak and at each out-of-memory");
  add_analysis_options(cmd, *a, false);
  return {cmd, [a] {
            a->options.timeline = true;  // reserved minus allocated over time
            std::vector<ProcessAnalysis> processes;
            if (!load_analyses("frag", *a, processes)) return 1;
            FragView view = frag_view(processes);
            print(a->json, to_json(view), to_text(view));
            return 0;
          }};
}

}  // namespace memtrace::cli
