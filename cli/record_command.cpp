// memtrace _record --pid PID: the collector the memtrace Python package starts for
// memtrace.record() inside a running program (collector/run.h, record_command). Hidden: people
// record with `memtrace run` or from Python.
#include <memory>

#include "command.h"
#include "memtrace/collector/run.h"

namespace memtrace::cli {

namespace {

struct RecordCli {
  RunOptions run;
  int pid = 0;
};

}  // namespace

Command add_record_command(CLI::App& app) {
  auto c = std::make_shared<RecordCli>();
  CLI::App* cmd = app.add_subcommand("_record", "The collector of memtrace.record (started by the Python package)");
  cmd->group("");  // not listed
  cmd->add_option("--pid", c->pid, "The process to record")->required();
  cmd->add_option("-o,--output", c->run.output_dir, "Folder for the trace (default: a new memtrace-DATE-TIME)");
  cmd->add_option("--compress", c->run.compression, "zstd level, 0 for none (default 1)")->check(CLI::Range(0, 19));
  cmd->add_option("--max-oom-snapshots", c->run.max_oom_snapshots, "Out-of-memory snapshots (default 8)")
      ->check(CLI::Range(0, 1000));
  cmd->add_flag("--snapshot-at-peak", c->run.snapshot_at_peak, "Keep a snapshot at the peak");
  cmd->add_flag("--no-summary{false}", c->run.summary, "No summary on stderr at the end");
  cmd->add_flag("--attached", c->run.attached, "The collector of memtrace attach");
  return {cmd, [c] { return record_command(c->run, c->pid); }};
}

}  // namespace memtrace::cli
