// memtrace run [OPTIONS] -- CMD [ARGS...]: the collector (collector/run.cpp) behind its options.
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "command.h"
#include "memtrace/base/units.h"
#include "memtrace/collector/run.h"
#include "memtrace/engine/trace_set.h"
#include "memtrace/format/run_folder.h"
#include "memtrace/views/verify.h"

namespace memtrace::cli {

namespace {

struct RunCli {
  RunOptions run;
  std::string sim_capacity, snapshot_every, umask, max_stall;
  int sim_devices = 0;
  bool no_native = false, no_python = false;
  CLI::Option *capacity_option, *devices_option, *every_option, *umask_option, *stall_option;
};

// --verify: what was recorded against CUPTI's records, for each process, on stderr.
void print_verification(const std::string& dir) {
  std::string error;
  VerifyView view;
  for (const std::string& path : run_folder::find_traces(dir, error)) {
    VerifyResult r;
    if (verify_trace(path, 10, r, error)) view.processes.push_back(std::move(r));
  }
  std::fprintf(stderr, "memtrace: verify:\n%s", to_text(view).c_str());
}

// Checks what CLI11 cannot, fills in RunOptions, runs. memtrace's own failures exit 125.
int run(RunCli& c) {
  auto fail = [](const char* what, const std::string& value, const char* example) {
    std::fprintf(stderr, "memtrace run: %s: '%s' is not %s\n", what, value.c_str(), example);
    return kExitMemtraceFailedCode;
  };
  if (*c.capacity_option) {
    auto bytes = parse_size(c.sim_capacity);
    if (!bytes || *bytes == 0) return fail("--sim-capacity", c.sim_capacity, "a size (try 80GiB)");
    if (*bytes < (1u << 20))
      std::fprintf(stderr, "memtrace run: warning: --sim-capacity %s is %llu bytes per device (a unit, as in 80GiB?)\n",
                   c.sim_capacity.c_str(), static_cast<unsigned long long>(*bytes));
    c.run.sim_capacity = bytes;
  }
  if (*c.devices_option) c.run.sim_devices = c.sim_devices;
  if ((*c.capacity_option || *c.devices_option) && !c.run.sim) {
    std::fprintf(stderr, "memtrace run: --sim-capacity and --sim-devices need --sim\n");
    return kExitMemtraceFailedCode;
  }
  if (*c.every_option) {
    auto ns = parse_duration_ns(c.snapshot_every);
    if (!ns || *ns < 100'000'000ull)
      return fail("--snapshot-every", c.snapshot_every, "a duration of 0.1s or more (try 30s)");
    c.run.snapshot_every_ns = *ns;
  }
  if (*c.stall_option) {
    auto ns = parse_duration_ns(c.max_stall);
    if (!ns) return fail("--max-stall", c.max_stall, "a duration (try 10s)");
    c.run.max_stall_ns = *ns;
  }
  if (*c.umask_option) {
    char* end = nullptr;
    unsigned long mask = std::strtoul(c.umask.c_str(), &end, 8);
    if (c.umask.empty() || *end || mask > 0777) return fail("--umask", c.umask, "an octal umask (try 027)");
    c.run.umask = static_cast<unsigned>(mask);
  }
  c.run.native_stacks = !c.no_native;
  c.run.python_stacks = !c.no_python;
  std::string dir;
  int status = run_command(c.run, &dir);
  if (c.run.verify && !dir.empty()) print_verification(dir);
  return status;
}

}  // namespace

Command add_run_command(CLI::App& app) {
  auto c = std::make_shared<RunCli>();
  CLI::App* cmd = app.add_subcommand("run", "Run CMD and record every CUDA allocation and free it makes");
  cmd->add_option("-o,--output", c->run.output_dir, "Folder for the traces (default: a new memtrace-DATE-TIME)");
  cmd->add_flag("--append", c->run.append,
                "With -o: add this run's traces to a folder that holds another run's (as more processes of one job)");
  cmd->add_flag("--sim", c->run.sim, "Run on the simulated CUDA device (no GPU needed)");
  c->capacity_option = cmd->add_option("--sim-capacity", c->sim_capacity, "Memory per simulated device, e.g. 80GiB");
  c->devices_option =
      cmd->add_option("--sim-devices", c->sim_devices, "Number of simulated devices")->check(CLI::Range(1, 64));
  cmd->add_option("--stack-depth", c->run.stack_depth, "Native frames to record per allocation (default 64)")
      ->check(CLI::Range(1, 256));
  cmd->add_option("--compress", c->run.compression, "zstd level for the traces, 0 for none (default 1)")
      ->check(CLI::Range(0, 19));
  cmd->add_option("--max-oom-snapshots", c->run.max_oom_snapshots, "Out-of-memory snapshots per process (default 8)")
      ->check(CLI::Range(0, 1000));
  c->every_option = cmd->add_option("--snapshot-every", c->snapshot_every,
                                    "Take a snapshot of every traced process this often, e.g. 30s, 5m");
  cmd->add_flag("--snapshot-at-peak", c->run.snapshot_at_peak, "Keep a snapshot of each process at its peak");
  cmd->add_flag("--redact-args", c->run.redact_args,
                "Keep the program's arguments out of the traces ($1, $2, ... instead)");
  c->umask_option =
      cmd->add_option("--umask", c->umask, "Permissions of what memtrace writes, as a umask (default 077: only you)");
  c->stall_option =
      cmd->add_option("--max-stall", c->max_stall,
                      "How long the program may wait for a stalled memtrace before it drops events (default 10s)");
  cmd->add_flag("--no-native-stacks", c->no_native, "Record only the immediate caller, not the native stack");
  cmd->add_flag("--no-python-stacks", c->no_python, "Do not record Python frames");
  cmd->add_flag("--verify", c->run.verify,
                "Keep CUPTI's own memory records too and list, at the end, every allocation only one side saw "
                "(memtrace verify PATH does it again)");
  cmd->add_option("--backend", c->run.backend,
                  "How calls are seen: preload (interposers), cupti (CUPTI's callbacks), auto (both, each call once; "
                  "default)")
      ->check(CLI::IsMember({"auto", "preload", "cupti"}));
  cmd->add_option("command", c->run.command, "The program to run and its arguments (after --)");
  cmd->footer(
      "Exit status: CMD's own, 128+N when signal N killed it; 125 when memtrace failed,\n"
      "126 when CMD cannot run, 127 when it is not found.");
  return {cmd, [c] { return run(*c); }};
}

}  // namespace memtrace::cli
