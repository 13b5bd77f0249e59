// memtrace frag PATH: free memory inside the allocator's segments, at the peak and each OOM.
#include <memory>

#include "command.h"
#include "memtrace/whatif/whatif.h"
#include "options.h"

namespace memtrace::cli {

Command add_frag_command(CLI::App& app) {
  auto a = std::make_shared<AnalysisCli>();
  CLI::App* cmd = app.add_subcommand("frag",
                                     "Free memory inside the allocator's segments: fragmentation at the "
                                     "peak and at each out-of-memory");
  add_analysis_options(cmd, *a, false);
  a->options.timeline = true;     // reserved minus allocated over time
  a->options.categories = false;  // what frag does not show
  return {cmd, [a] {
            return analyze_and_show("frag", *a, [](const std::vector<ProcessAnalysis>& processes) {
              FragView view = frag_view(processes);
              for (size_t i = 0; i < processes.size() && i < view.processes.size(); ++i)
                predict_expandable_segments(processes[i], view.processes[i].expandable_segments);
              return view;
            });
          }};
}

}  // namespace memtrace::cli
