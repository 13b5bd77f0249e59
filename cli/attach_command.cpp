// memtrace attach PID and memtrace detach PID: recording a process that is already running
// (collector/attach/), and leaving it.
#include <cstdio>
#include <memory>

#include "command.h"
#include "memtrace/base/units.h"
#include "memtrace/collector/attach.h"
#include "memtrace/views/snapshot_view.h"
#include "options.h"

namespace memtrace::cli {

namespace {

struct AttachCli {
  AttachOptions attach;
  std::string duration;
  bool no_native = false, no_python = false;
};

int attach(AttachCli& c) {
  if (!c.duration.empty()) {
    auto ns = parse_duration_ns(c.duration);
    if (!ns || *ns == 0) {
      std::fprintf(stderr, "memtrace attach: --for: '%s' is not a duration (try 30s or 10m)\n", c.duration.c_str());
      return kExitUsage;
    }
    c.attach.duration_ns = *ns;
  }
  c.attach.native_stacks = !c.no_native;
  c.attach.python_stacks = !c.no_python;
  std::string snapshot;
  int status = attach_command(c.attach, &snapshot);
  if (status != 0 || snapshot.empty()) return status;
  // --snapshot: what it holds now, as memtrace snapshot shows it.
  SnapshotView view;
  std::string error;
  AnalysisOptions options;
  if (!snapshot_view({snapshot}, options, view, error)) {
    std::fprintf(stderr, "memtrace attach: %s\n", error.c_str());
    return kExitUsage;
  }
  show(false, view);
  std::fprintf(stderr, "memtrace: snapshot %s\n", snapshot.c_str());
  return 0;
}

}  // namespace

Command add_attach_command(CLI::App& app) {
  auto c = std::make_shared<AttachCli>();
  CLI::App* cmd = app.add_subcommand(
      "attach",
      "Record a process that is already running, from now on, and leave it running as before (Ctrl-C, --for or "
      "memtrace detach PID)");
  cmd->add_option("pid", c->attach.pid, "The process to record")->required()->check(CLI::PositiveNumber);
  cmd->add_option("-o,--output", c->attach.output_dir, "Folder for the trace (default: a new memtrace-DATE-TIME)");
  cmd->add_option("--for", c->duration, "Leave after this long (30s, 10m, 1h); default: until Ctrl-C");
  cmd->add_flag("--snapshot", c->attach.snapshot,
                "Write one snapshot of what the process holds now, show it, and leave");
  cmd->add_option("--stack-depth", c->attach.stack_depth, "Native frames kept per stack (default 64)")
      ->check(CLI::Range(0, 256));
  cmd->add_flag("--no-native-stacks", c->no_native, "Record no native frames");
  cmd->add_flag("--no-python-stacks", c->no_python, "Record no Python frames");
  cmd->add_option("--compress", c->attach.compression, "zstd level, 0 for none (default 1)")->check(CLI::Range(0, 19));
  return {cmd, [c] { return attach(*c); }};
}

Command add_detach_command(CLI::App& app) {
  auto pid = std::make_shared<int>(0);
  CLI::App* cmd = app.add_subcommand("detach", "Stop the memtrace attach recording process PID; the process runs on");
  cmd->add_option("pid", *pid, "The process memtrace is attached to")->required()->check(CLI::PositiveNumber);
  return {cmd, [pid] { return detach_command(*pid); }};
}

}  // namespace memtrace::cli
