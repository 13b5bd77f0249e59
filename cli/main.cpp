// The memtrace executable: every subcommand in one program.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "memtrace/analysis/estimate.h"
#include "memtrace/analysis/explain.h"
#include "memtrace/analysis/export_jsonl.h"
#include "memtrace/analysis/report_render.h"
#include "memtrace/analysis/snapshot_view.h"
#include "memtrace/analysis/trace_set.h"
#include "memtrace/analysis/units.h"
#include "memtrace/collector/run.h"

namespace {

constexpr int kExitUsage = 2;

// The reports of every trace PATH names; false after saying why on stderr.
bool load_reports(const char* command, const std::string& path, const memtrace::ReportOptions& options,
                  std::vector<memtrace::ProcessReport>& processes) {
  std::string error;
  std::vector<std::string> traces = memtrace::find_traces(path, error);
  if (traces.empty()) {
    std::fprintf(stderr, "memtrace %s: %s\n", command, error.c_str());
    return false;
  }
  for (const auto& trace : traces) {
    memtrace::ProcessReport p;
    if (!memtrace::analyze_trace(trace, options, p, error)) {
      std::fprintf(stderr, "memtrace %s: %s\n", command, error.c_str());
      return false;
    }
    if (!p.complete) std::fprintf(stderr, "memtrace %s: %s: %s\n", command, trace.c_str(), p.problem.c_str());
    processes.push_back(std::move(p));
  }
  return true;
}

int report(const std::string& path, bool json, const memtrace::ReportOptions& options) {
  std::vector<memtrace::ProcessReport> processes;
  if (!load_reports("report", path, options, processes)) return 1;
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

struct EstimateCli {
  std::string model, config, params, micro_batch, gpu, gpu_memory, cuda_context, workspace, comm_buffers;
  memtrace::EstimateOptions options;
  bool json = false;
};

void add_estimate_options(CLI::App* cmd, EstimateCli& e) {
  cmd->add_option("--model", e.model, "A built-in model: llama-2-7b, llama-2-13b, llama-2-70b, llama-3-8b, "
                                      "llama-3-70b, mistral-7b, gpt2, gpt2-medium, gpt2-large, gpt2-xl");
  cmd->add_option("--config", e.config, "A Hugging Face style config.json");
  cmd->add_option("--mode", e.options.mode, "train or infer (default train)")->check(CLI::IsMember({"train", "infer"}));
  cmd->add_option("--precision", e.options.precision, "fp32, bf16, fp16, fp8, int8, int4 (default bf16)");
  cmd->add_option("--params", e.params, "Nominal parameter count, e.g. 7e9 (default: from the shapes)");
  cmd->add_option("--batch", e.options.batch, "Sequences per GPU (default 1)")->check(CLI::PositiveNumber);
  cmd->add_option("--micro-batch", e.micro_batch, "Micro-batch size with gradient accumulation");
  cmd->add_option("--seq", e.options.seq, "Training sequence length (default 2048)")->check(CLI::PositiveNumber);
  cmd->add_option("--context", e.options.context, "Inference context length (default 4096)")->check(CLI::PositiveNumber);
  cmd->add_option("--kv-block", e.options.kv_block, "Paged KV cache block size in tokens");
  cmd->add_option("--optimizer", e.options.optimizer,
                  "sgd, sgd-momentum, lion, adam, adamw, adam8bit, adafactor (default adamw)");
  cmd->add_flag("--checkpointing", e.options.checkpointing, "Activation checkpointing");
  cmd->add_flag("--flash-attention", e.options.flash_attention, "FlashAttention (no s² attention scores)");
  cmd->add_flag("--sp", e.options.sequence_parallel, "Sequence parallelism (with --tp)");
  cmd->add_option("--gpus", e.options.gpus, "GPUs in all (default 1)")->check(CLI::PositiveNumber);
  cmd->add_option("--zero", e.options.zero, "ZeRO stage 1, 2 or 3 (3 is FSDP)")->check(CLI::Range(0, 3));
  cmd->add_option("--tp", e.options.tp, "Tensor parallel degree")->check(CLI::PositiveNumber);
  cmd->add_option("--pp", e.options.pp, "Pipeline parallel degree")->check(CLI::PositiveNumber);
  cmd->add_option("--offload", e.options.offload, "optimizer or params, to the CPU")
      ->check(CLI::IsMember({"optimizer", "params"}));
  cmd->add_option("--cuda-context", e.cuda_context, "CUDA context size (default 512MiB)");
  cmd->add_option("--workspace", e.workspace, "cuBLAS/cuDNN workspace (default 256MiB)");
  cmd->add_option("--comm-buffers", e.comm_buffers, "Communication buffers (default 1GiB with several GPUs)");
  cmd->add_option("--gpu", e.gpu, "H100-80GB, H200, A100-40GB, A100-80GB, L40S, RTX-4090, ...");
  cmd->add_option("--gpu-memory", e.gpu_memory, "The GPU's memory, e.g. 80GiB");
  cmd->add_flag("--json", e.json, "Print JSON");
}

// Reads the model and the sizes; prints one line and returns false when something is off.
bool resolve_estimate(const char* command, EstimateCli& e, memtrace::ModelShape& model) {
  auto fail = [&](const std::string& what) {
    std::fprintf(stderr, "memtrace %s: %s\n", command, what.c_str());
    return false;
  };
  if (e.model.empty() == e.config.empty()) return fail("give one of --model NAME or --config config.json");
  if (!e.model.empty()) {
    auto preset = memtrace::model_preset(e.model);
    if (!preset) return fail("unknown model '" + e.model + "' (see --help for the built-in ones)");
    model = *preset;
  } else {
    std::ifstream in(e.config);
    if (!in) return fail("cannot read " + e.config);
    nlohmann::json config = nlohmann::json::parse(in, nullptr, false);
    if (config.is_discarded() || !config.is_object()) return fail(e.config + " is not a JSON object");
    std::string error;
    auto shape = memtrace::model_from_config(config, error);
    if (!shape) return fail(error);
    model = *shape;
  }
  if (!e.params.empty()) {
    char* end = nullptr;
    double p = std::strtod(e.params.c_str(), &end);
    if (end == e.params.c_str() || *end || p <= 0) return fail("--params: '" + e.params + "' is not a count (try 7e9)");
    e.options.params = p;
  }
  if (!e.micro_batch.empty()) e.options.micro_batch = std::strtoll(e.micro_batch.c_str(), nullptr, 10);
  for (auto [text, target] : {std::pair{&e.cuda_context, &e.options.cuda_context}, {&e.workspace, &e.options.workspace}}) {
    if (text->empty()) continue;
    auto bytes = memtrace::parse_size(*text);
    if (!bytes) return fail("'" + *text + "' is not a size");
    *target = *bytes;
  }
  if (!e.comm_buffers.empty()) {
    auto bytes = memtrace::parse_size(e.comm_buffers);
    if (!bytes) return fail("'" + e.comm_buffers + "' is not a size");
    e.options.comm_buffers = bytes;
  }
  if (!e.gpu.empty()) e.options.gpu = e.gpu;
  if (!e.gpu_memory.empty()) {
    auto bytes = memtrace::parse_size(e.gpu_memory);
    if (!bytes) return fail("--gpu-memory: '" + e.gpu_memory + "' is not a size");
    e.options.gpu_memory = bytes;
  }
  return true;
}

int estimate_command(EstimateCli& e) {
  memtrace::ModelShape model;
  if (!resolve_estimate("estimate", e, model)) return 2;
  memtrace::Estimate result;
  std::string error;
  if (!memtrace::estimate(model, e.options, result, error)) {
    std::fprintf(stderr, "memtrace estimate: %s\n", error.c_str());
    return 2;
  }
  if (e.json) std::printf("%s\n", memtrace::estimate_json(result).dump(2).c_str());
  else std::fputs(memtrace::estimate_text(result).c_str(), stdout);
  return 0;
}

int explain_command(const std::string& path, EstimateCli& e) {
  memtrace::ModelShape model;
  if (!resolve_estimate("explain", e, model)) return 2;
  memtrace::Estimate result;
  std::string error;
  if (!memtrace::estimate(model, e.options, result, error)) {
    std::fprintf(stderr, "memtrace explain: %s\n", error.c_str());
    return 2;
  }
  std::vector<memtrace::ProcessReport> processes;
  if (!load_reports("explain", path, memtrace::ReportOptions(), processes)) return 1;
  memtrace::Explanation x = memtrace::explain(result, processes);
  if (e.json) std::printf("%s\n", memtrace::explanation_json(x).dump(2).c_str());
  else std::fputs(memtrace::explanation_text(x).c_str(), stdout);
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
  run_cmd->add_flag("--redact-args", run.redact_args,
                    "Keep the program's arguments out of the traces ($1, $2, ... instead)");
  std::string umask_text;
  CLI::Option* umask_option = run_cmd->add_option(
      "--umask", umask_text, "Permissions of what memtrace writes, as a umask (default 077: only you)");
  std::string max_stall;
  CLI::Option* stall = run_cmd->add_option(
      "--max-stall", max_stall, "How long the program may wait for a stalled memtrace before it drops events (default 10s)");
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

  EstimateCli estimate_cli;
  CLI::App* estimate_cmd =
      app.add_subcommand("estimate", "How much GPU memory a model needs to train or serve, from the standard formulas");
  add_estimate_options(estimate_cmd, estimate_cli);

  std::string explain_path;
  EstimateCli explain_cli;
  CLI::App* explain_cmd = app.add_subcommand("explain", "Hold what a trace measured against the estimate");
  explain_cmd->add_option("path", explain_path, "An output folder or one .memtrace file")->required();
  add_estimate_options(explain_cmd, explain_cli);

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
    if (*stall) {
      auto ns = memtrace::parse_duration_ns(max_stall);
      if (!ns) {
        std::fprintf(stderr, "memtrace run: --max-stall: '%s' is not a duration (try 10s)\n", max_stall.c_str());
        return memtrace::kExitMemtraceFailedCode;
      }
      run.max_stall_ns = *ns;
    }
    if (*umask_option) {
      char* end = nullptr;
      unsigned long mask = std::strtoul(umask_text.c_str(), &end, 8);
      if (umask_text.empty() || *end || mask > 0777) {
        std::fprintf(stderr, "memtrace run: --umask: '%s' is not an octal umask (try 027)\n", umask_text.c_str());
        return memtrace::kExitMemtraceFailedCode;
      }
      run.umask = static_cast<unsigned>(mask);
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
  if (*estimate_cmd) return estimate_command(estimate_cli);
  if (*explain_cmd) return explain_command(explain_path, explain_cli);
  if (*export_cmd) return export_events(export_path, export_format, export_output, export_keep_cuda);
  return kExitUsage;
}
