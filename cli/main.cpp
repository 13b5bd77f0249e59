// The memtrace executable: every subcommand in one program.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "memtrace/analysis/export_jsonl.h"
#include "memtrace/analysis/report_render.h"
#include "memtrace/analysis/snapshot_view.h"
#include "memtrace/analysis/trace_set.h"
#include "memtrace/analysis/units.h"
#include "memtrace/collector/run.h"

namespace {

constexpr int kExitUsage = 2;

int report(const std::string& path, bool json, const memtrace::ReportOptions& options) {
  std::string error;
  std::vector<std::string> traces = memtrace::find_traces(path, error);
  if (traces.empty()) {
    std::fprintf(stderr, "memtrace report: %s\n", error.c_str());
    return 1;
  }
  std::vector<memtrace::ProcessReport> processes;
  for (const auto& trace : traces) {
    memtrace::ProcessReport p;
    if (!memtrace::analyze_trace(trace, options, p, error)) {
      std::fprintf(stderr, "memtrace report: %s\n", error.c_str());
      return 1;
    }
    if (!p.complete) std::fprintf(stderr, "memtrace report: %s: %s\n", trace.c_str(), p.problem.c_str());
    processes.push_back(std::move(p));
  }
  if (json)
    std::printf("%s\n", memtrace::report_json(processes).dump(2).c_str());
  else
    std::fputs(memtrace::report_text(processes).c_str(), stdout);
  return 0;
}

int snapshot(const std::string& path, bool json, const memtrace::ReportOptions& options) {
  std::string error;
  std::vector<std::string> files = memtrace::find_snapshots(path, error);
  if (files.empty()) {
    std::fprintf(stderr, "memtrace snapshot: %s\n", error.c_str());
    return 1;
  }
  nlohmann::json all = nlohmann::json::array();
  std::string text;
  for (const auto& file : files) {
    memtrace::SnapshotReport s;
    if (!memtrace::read_snapshot(file, options, s, error)) {
      std::fprintf(stderr, "memtrace snapshot: %s\n", error.c_str());
      return 1;
    }
    all.push_back(memtrace::snapshot_json(s));
    text += (text.empty() ? "" : "\n") + memtrace::snapshot_text(s);
  }
  if (json) std::printf("%s\n", (files.size() == 1 ? all[0] : nlohmann::json{{"snapshots", all}}).dump(2).c_str());
  else std::fputs(text.c_str(), stdout);
  return 0;
}

int export_events(const std::string& path, const std::string& format, const std::string& output, bool keep_cuda) {
  if (format != "jsonl") {
    std::fprintf(stderr, "memtrace export: unknown format '%s' (known: jsonl)\n", format.c_str());
    return kExitUsage;
  }
  std::string error;
  std::vector<std::string> traces = memtrace::find_traces(path, error);
  if (traces.empty()) {
    std::fprintf(stderr, "memtrace export: %s\n", error.c_str());
    return 1;
  }
  std::FILE* out = stdout;
  if (!output.empty() && output != "-") {
    out = std::fopen(output.c_str(), "wxe");  // never over an existing file
    if (!out) {
      std::fprintf(stderr, "memtrace export: cannot create %s: %s\n", output.c_str(), std::strerror(errno));
      return 1;
    }
  }
  std::vector<std::string> warnings;
  bool ok = memtrace::export_jsonl(traces, out, keep_cuda, warnings, error);
  if (out != stdout) std::fclose(out);
  for (const auto& w : warnings) std::fprintf(stderr, "memtrace export: %s\n", w.c_str());
  if (!ok) std::fprintf(stderr, "memtrace export: %s\n", error.c_str());
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "memtrace: a GPU memory profiler for CUDA programs.\n"
      "Record with `memtrace run -- CMD`, then read the traces with `memtrace report`."};
  app.set_version_flag("--version", "memtrace 0.1.0");
  app.require_subcommand(1);

  memtrace::RunOptions run;
  std::string sim_capacity;
  int sim_devices = 0;
  CLI::App* run_cmd = app.add_subcommand("run", "Run CMD and record every CUDA allocation and free it makes");
  run_cmd->add_option("-o,--output", run.output_dir, "Folder for the traces (default: a new memtrace-DATE-TIME)");
  run_cmd->add_flag("--sim", run.sim, "Run on the simulated CUDA device (no GPU needed)");
  CLI::Option* cap = run_cmd->add_option("--sim-capacity", sim_capacity, "Memory per simulated device, e.g. 80GiB");
  CLI::Option* devs =
      run_cmd->add_option("--sim-devices", sim_devices, "Number of simulated devices")->check(CLI::Range(1, 64));
  run_cmd->add_option("--stack-depth", run.stack_depth, "Native frames to record per allocation (default 64)")
      ->check(CLI::Range(1, 256));
  run_cmd->add_option("--compress", run.compression, "zstd level for the traces, 0 for none (default 1)")
      ->check(CLI::Range(0, 19));
  std::string snapshot_every;
  run_cmd->add_option("--max-oom-snapshots", run.max_oom_snapshots, "Out-of-memory snapshots per process (default 8)")
      ->check(CLI::Range(0, 1000));
  CLI::Option* every = run_cmd->add_option("--snapshot-every", snapshot_every,
                                           "Take a snapshot of every traced process this often, e.g. 30s, 5m");
  run_cmd->add_flag("--snapshot-at-peak", run.snapshot_at_peak, "Keep a snapshot of each process at its peak");
  bool no_native = false, no_python = false;
  run_cmd->add_flag("--no-native-stacks", no_native, "Record only the immediate caller, not the native stack");
  run_cmd->add_flag("--no-python-stacks", no_python, "Do not record Python frames");
  run_cmd->add_option("command", run.command, "The program to run and its arguments (after --)");
  run_cmd->footer(
      "Exit status: CMD's own, 128+N when signal N killed it; 125 when memtrace failed,\n"
      "126 when CMD cannot run, 127 when it is not found.");

  std::string report_path, by = "user";
  bool report_json = false;
  memtrace::ReportOptions report_options;
  CLI::App* report_cmd = app.add_subcommand("report", "Summarize traces: events, peaks, largest sites");
  report_cmd->add_option("path", report_path, "An output folder or one .memtrace file")->required();
  report_cmd->add_flag("--json", report_json, "Print JSON instead of text");
  report_cmd->add_option("--by", by,
                         "Group sites by: user (innermost Python frame, else native; default), python, native, stack")
      ->check(CLI::IsMember({"user", "python", "native", "stack"}));
  report_cmd->add_flag("--keep-cuda-frames", report_options.keep_cuda_frames,
                       "Show frames inside the CUDA libraries at the top of stacks");

  std::string snapshot_path, snapshot_by = "user";
  bool snapshot_as_json = false;
  memtrace::ReportOptions snapshot_options;
  CLI::App* snapshot_cmd = app.add_subcommand("snapshot", "What a snapshot (.memsnap) shows: the diagnosis, then the largest sites");
  snapshot_cmd->add_option("path", snapshot_path, "A .memsnap file, or a folder of them")->required();
  snapshot_cmd->add_flag("--json", snapshot_as_json, "Print JSON instead of text");
  snapshot_cmd->add_option("--top", snapshot_options.top_sites, "How many sites to show (default 10)")
      ->check(CLI::Range(1, 100000));
  snapshot_cmd->add_option("--by", snapshot_by, "Group sites by: user (default), python, native, stack")
      ->check(CLI::IsMember({"user", "python", "native", "stack"}));
  snapshot_cmd->add_flag("--keep-cuda-frames", snapshot_options.keep_cuda_frames,
                         "Show frames inside the CUDA libraries at the top of stacks");

  std::string export_path, export_format = "jsonl", export_output;
  CLI::App* export_cmd = app.add_subcommand("export", "Write every event in a format other tools read");
  export_cmd->add_option("path", export_path, "An output folder or one .memtrace file")->required();
  export_cmd->add_option("--format", export_format, "jsonl: one JSON object per event")->required();
  export_cmd->add_option("-o,--output", export_output, "Output file (default: standard output)");
  bool export_keep_cuda = false;
  export_cmd->add_flag("--keep-cuda-frames", export_keep_cuda, "Keep frames inside the CUDA libraries in stacks");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : kExitUsage;
  }

  if (*run_cmd) {
    if (*cap) {
      auto bytes = memtrace::parse_size(sim_capacity);
      if (!bytes || *bytes == 0) {
        std::fprintf(stderr, "memtrace run: --sim-capacity: '%s' is not a size (try 80GiB)\n", sim_capacity.c_str());
        return memtrace::kExitMemtraceFailedCode;
      }
      run.sim_capacity = bytes;
    }
    if (*devs) run.sim_devices = sim_devices;
    if ((*cap || *devs) && !run.sim) {
      std::fprintf(stderr, "memtrace run: --sim-capacity and --sim-devices need --sim\n");
      return memtrace::kExitMemtraceFailedCode;
    }
    if (*every) {
      auto ns = memtrace::parse_duration_ns(snapshot_every);
      if (!ns || *ns < 100'000'000ull) {
        std::fprintf(stderr, "memtrace run: --snapshot-every: '%s' is not a duration of 0.1s or more (try 30s)\n",
                     snapshot_every.c_str());
        return memtrace::kExitMemtraceFailedCode;
      }
      run.snapshot_every_ns = *ns;
    }
    run.native_stacks = !no_native;
    run.python_stacks = !no_python;
    return memtrace::run_command(run);
  }
  auto grouping = [](const std::string& name) {
    return name == "python"   ? memtrace::SiteGrouping::kPython
           : name == "native" ? memtrace::SiteGrouping::kNative
           : name == "stack"  ? memtrace::SiteGrouping::kStack
                              : memtrace::SiteGrouping::kUser;
  };
  if (*report_cmd) {
    report_options.grouping = grouping(by);
    return report(report_path, report_json, report_options);
  }
  if (*snapshot_cmd) {
    snapshot_options.grouping = grouping(snapshot_by);
    return snapshot(snapshot_path, snapshot_as_json, snapshot_options);
  }
  if (*export_cmd) return export_events(export_path, export_format, export_output, export_keep_cuda);
  return kExitUsage;
}
