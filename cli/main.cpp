// The memtrace executable: every subcommand in one program, each in a file of its own.
#include <CLI/CLI.hpp>
#include <vector>

#include "command.h"
#include "options.h"

int main(int argc, char** argv) {
  using namespace memtrace::cli;
  CLI::App app{
      "memtrace: a GPU memory profiler for CUDA programs.\n"
      "Record with `memtrace run -- CMD`, then read the traces with `memtrace report`."};
  app.set_version_flag("--version", "memtrace " MEMTRACE_VERSION);
  app.require_subcommand(1);
  const std::vector<Command> commands = {
      add_run_command(app),  add_report_command(app), add_snapshot_command(app), add_export_command(app),
      add_peak_command(app), add_leaks_command(app),  add_frag_command(app),     add_timeline_command(app),
      add_diff_command(app), add_check_command(app),  add_estimate_command(app), add_explain_command(app),
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : kExitUsage;
  }
  for (const Command& c : commands)
    if (*c.app) return c.run();
  return kExitUsage;
}
