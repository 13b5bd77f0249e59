// The memtrace executable: every subcommand in one program.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <regex>
#include <tuple>
#include <string>
#include <vector>

#include "memtrace/analysis/estimate.h"
#include "memtrace/analysis/explain.h"
#include "memtrace/analysis/export_jsonl.h"
#include "memtrace/analysis/export_profiles.h"
#include "memtrace/analysis/process_analysis.h"
#include "memtrace/analysis/report_render.h"
#include "memtrace/analysis/snapshot_view.h"
#include "memtrace/analysis/trace_set.h"
#include "memtrace/analysis/units.h"
#include "memtrace/analysis/views.h"
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

// What every analysis command shares: the path, --json, how sites group, steps.
struct AnalysisCli {
  std::string path, by = "user", step;
  bool json = false;
  memtrace::AnalysisOptions options;
};

memtrace::SiteGrouping grouping_named(const std::string& name) {
  return name == "python"   ? memtrace::SiteGrouping::kPython
         : name == "native" ? memtrace::SiteGrouping::kNative
         : name == "stack"  ? memtrace::SiteGrouping::kStack
         : name == "api"    ? memtrace::SiteGrouping::kApi
                            : memtrace::SiteGrouping::kUser;
}

void add_analysis_options(CLI::App* cmd, AnalysisCli& a, bool sites = true) {
  cmd->add_option("path", a.path, "An output folder (all its processes) or one .memtrace file")->required();
  cmd->add_flag("--json", a.json, "Print JSON instead of text");
  cmd->add_option("--step", a.step,
                  "Regular expression naming the NVTX range or mark that starts a training step "
                  "(default: memtrace.step, or PyTorch's Optimizer.step#... ranges)");
  if (!sites) return;
  cmd->add_option("--top", a.options.top_sites, "How many sites to show (default 10)")->check(CLI::Range(1, 1000000));
  cmd->add_option("--by", a.by, "Group sites by: user (default), python, native, stack, api")
      ->check(CLI::IsMember({"user", "python", "native", "stack", "api"}));
  cmd->add_flag("--keep-cuda-frames", a.options.keep_cuda_frames, "Show frames inside the CUDA libraries");
}

// Analyzes what A names; prints why and returns false when it cannot.
bool load_analyses(const char* command, AnalysisCli& a, std::vector<memtrace::ProcessAnalysis>& out) {
  a.options.grouping = grouping_named(a.by);
  if (!a.step.empty()) {
    try {
      std::regex check(a.step);
    } catch (const std::regex_error& e) {
      std::fprintf(stderr, "memtrace %s: --step: '%s' is not a regular expression: %s\n", command, a.step.c_str(), e.what());
      return false;
    }
    a.options.step_pattern = a.step;
  }
  std::vector<std::string> warnings;
  std::string error;
  bool ok = memtrace::analyze_path(a.path, a.options, out, warnings, error);
  for (const auto& w : warnings) std::fprintf(stderr, "memtrace %s: %s\n", command, w.c_str());
  if (!ok) std::fprintf(stderr, "memtrace %s: %s\n", command, error.c_str());
  return ok;
}

void print(bool json, const nlohmann::json& doc, const std::string& text) {
  if (json)
    std::printf("%s\n", doc.dump(2).c_str());
  else
    std::fputs(text.c_str(), stdout);
}

// An analysis command whose text is made from its JSON: analyze, then print one or the other.
int view(const char* command, AnalysisCli& a, nlohmann::json (*to_json)(const std::vector<memtrace::ProcessAnalysis>&),
         std::string (*to_text)(const nlohmann::json&)) {
  std::vector<memtrace::ProcessAnalysis> processes;
  if (!load_analyses(command, a, processes)) return 1;
  nlohmann::json doc = to_json(processes);
  print(a.json, doc, to_text(doc));
  return 0;
}

// Writes TEXT to PATH, never over an existing file; false after saying why.
bool write_new_file(const char* command, const std::string& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "wxe");
  if (!f) {
    std::fprintf(stderr, "memtrace %s: cannot create %s: %s\n", command, path.c_str(), std::strerror(errno));
    return false;
  }
  bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  ok &= std::fclose(f) == 0;
  if (!ok) std::fprintf(stderr, "memtrace %s: cannot write %s\n", command, path.c_str());
  return ok;
}

int export_events(const std::string& path, const std::string& format, const std::string& output, bool keep_cuda,
                  const std::string& at) {
  if (format != "jsonl" && format != "folded" && format != "chrome") {
    std::fprintf(stderr, "memtrace export: unknown format '%s' (known: jsonl, folded, chrome)\n", format.c_str());
    return kExitUsage;
  }
  if (format == "folded") {
    AnalysisCli a;
    a.path = path;
    a.by = "stack";
    a.options.keep_cuda_frames = keep_cuda;
    a.options.top_sites = SIZE_MAX;
    std::vector<memtrace::ProcessAnalysis> processes;
    if (!load_analyses("export", a, processes)) return 1;
    std::string text = memtrace::export_folded(processes, at == "peak");
    if (output.empty() || output == "-") {
      std::fputs(text.c_str(), stdout);
      return 0;
    }
    return write_new_file("export", output, text) ? 0 : 1;
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
  bool ok = format == "chrome" ? memtrace::export_chrome(traces, out, warnings, error)
                               : memtrace::export_jsonl(traces, out, keep_cuda, warnings, error);
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
  export_cmd->add_option("--format", export_format,
                         "jsonl: one JSON object per event; folded: stacks for flame graphs (flamegraph.pl, "
                         "speedscope); chrome: a Chrome/Perfetto trace")
      ->required();
  std::string export_at = "peak";
  export_cmd->add_option("--at", export_at, "folded: what was live at the peak (default) or at the end")
      ->check(CLI::IsMember({"peak", "end"}));
  export_cmd->add_option("-o,--output", export_output, "Output file (default: standard output)");
  bool export_keep_cuda = false;
  export_cmd->add_flag("--keep-cuda-frames", export_keep_cuda, "Keep frames inside the CUDA libraries in stacks");

  AnalysisCli peak_cli;
  std::string peak_layer = "reserved";
  int peak_device = -1;
  CLI::App* peak_cmd = app.add_subcommand("peak", "When each device peaked, and what was live then, by site");
  add_analysis_options(peak_cmd, peak_cli);
  peak_cmd->add_option("--layer", peak_layer, "reserved (what the allocation APIs hold; default) or allocated "
                                              "(what allocators handed out)")
      ->check(CLI::IsMember({"reserved", "allocated", "device"}));
  CLI::Option* peak_device_option = peak_cmd->add_option("--device", peak_device, "Only this device")->check(CLI::Range(0, 1024));

  AnalysisCli leaks_cli;
  CLI::App* leaks_cmd = app.add_subcommand("leaks", "What was still live at the end, and what grew step by step");
  add_analysis_options(leaks_cmd, leaks_cli);

  AnalysisCli frag_cli;
  CLI::App* frag_cmd = app.add_subcommand("frag", "Free memory inside the allocator's segments: fragmentation at the "
                                                  "peak and at each out-of-memory");
  add_analysis_options(frag_cmd, frag_cli, false);

  AnalysisCli timeline_cli;
  size_t timeline_width = 72;
  std::string timeline_csv, timeline_svg;
  CLI::App* timeline_cmd = app.add_subcommand("timeline", "Memory over time per device and layer");
  add_analysis_options(timeline_cmd, timeline_cli, false);
  timeline_cmd->add_option("--width", timeline_width, "Columns of the terminal chart (default 72)")->check(CLI::Range(10, 1000));
  timeline_cmd->add_option("--csv", timeline_csv, "Also write the series as CSV to this new file");
  timeline_cmd->add_option("--svg", timeline_svg, "Also write a standalone SVG chart, phases shaded, to this new file");

  AnalysisCli diff_base, diff_new;
  CLI::App* diff_cmd = app.add_subcommand("diff", "Compare two runs: peaks, leaks and sites, what grew");
  diff_cmd->add_option("base", diff_base.path, "The baseline: an output folder or a .memtrace file")->required();
  diff_cmd->add_option("new", diff_new.path, "The run to compare with it")->required();
  diff_cmd->add_flag("--json", diff_new.json, "Print JSON instead of text");
  diff_cmd->add_option("--by", diff_new.by, "Group sites by: user (default), python, native, stack, api")
      ->check(CLI::IsMember({"user", "python", "native", "stack", "api"}));
  diff_cmd->add_option("--step", diff_new.step, "Regular expression naming the step range or mark");

  AnalysisCli check_cli;
  std::string max_peak, max_leaked, max_growth, check_baseline, check_junit;
  double max_regression = 0;
  CLI::App* check_cmd = app.add_subcommand(
      "check", "For CI: exit 0 when the run is within every limit, 1 when one is broken, 2 for bad use");
  add_analysis_options(check_cmd, check_cli, false);
  check_cmd->add_option("--max-peak", max_peak, "Largest peak of reserved memory on any device, e.g. 70GiB");
  check_cmd->add_option("--max-leaked", max_leaked, "Device memory still live at the end, all processes");
  check_cmd->add_option("--max-growth-per-step", max_growth, "Growth per step of any one site");
  check_cmd->add_option("--baseline", check_baseline, "A run to compare with (folder or .memtrace)");
  CLI::Option* regression = check_cmd->add_option("--max-regression", max_regression,
                                                  "Peak growth over --baseline allowed, in percent")
                                ->check(CLI::Range(-100.0, 1e9));
  check_cmd->add_option("--junit", check_junit, "Also write a JUnit XML report to this new file");

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
  if (*report_cmd) {
    report_options.grouping = grouping_named(by);
    return report(report_path, report_json, report_options);
  }
  if (*snapshot_cmd) {
    snapshot_options.grouping = grouping_named(snapshot_by);
    return snapshot(snapshot_path, snapshot_as_json, snapshot_options);
  }
  if (*estimate_cmd) return estimate_command(estimate_cli);
  if (*explain_cmd) return explain_command(explain_path, explain_cli);
  if (*export_cmd) return export_events(export_path, export_format, export_output, export_keep_cuda, export_at);
  if (*peak_cmd) {
    if (peak_layer == "device") {
      std::fprintf(stderr, "memtrace peak: the device layer is sampled only at out-of-memory moments; use --layer "
                           "reserved or allocated\n");
      return kExitUsage;
    }
    std::vector<memtrace::ProcessAnalysis> processes;
    if (!load_analyses("peak", peak_cli, processes)) return 1;
    memtrace::PeakOptions options;
    options.layer = peak_layer == "allocated" ? memtrace::Layer::kAllocated : memtrace::Layer::kReserved;
    if (*peak_device_option) options.device = peak_device;
    nlohmann::json doc = memtrace::peak_json(processes, options);
    print(peak_cli.json, doc, memtrace::peak_text(doc));
    return 0;
  }
  if (*leaks_cmd) return view("leaks", leaks_cli, memtrace::leaks_json, memtrace::leaks_text);
  if (*frag_cmd) {
    frag_cli.options.timeline = true;  // reserved minus allocated over time
    return view("frag", frag_cli, memtrace::frag_json, memtrace::frag_text);
  }
  if (*timeline_cmd) {
    timeline_cli.options.timeline = true;
    std::vector<memtrace::ProcessAnalysis> processes;
    if (!load_analyses("timeline", timeline_cli, processes)) return 1;
    if (!timeline_csv.empty() && !write_new_file("timeline", timeline_csv, memtrace::timeline_csv(processes))) return 1;
    if (!timeline_svg.empty() && !write_new_file("timeline", timeline_svg, memtrace::timeline_svg(processes))) return 1;
    if (timeline_cli.json)
      std::printf("%s\n", memtrace::timeline_json(processes).dump(2).c_str());
    else
      std::fputs(memtrace::timeline_text(processes, timeline_width).c_str(), stdout);
    return 0;
  }
  if (*diff_cmd) {
    diff_base.by = diff_new.by;
    diff_base.step = diff_new.step;
    std::vector<memtrace::ProcessAnalysis> base, next;
    if (!load_analyses("diff", diff_base, base) || !load_analyses("diff", diff_new, next)) return 1;
    nlohmann::json doc = memtrace::diff_json(base, next, diff_new.options.grouping);
    print(diff_new.json, doc, memtrace::diff_text(doc));
    return 0;
  }
  if (*check_cmd) {
    memtrace::CheckLimits limits;
    for (auto [text, target, flag] : {std::tuple{&max_peak, &limits.max_peak, "--max-peak"},
                                      {&max_leaked, &limits.max_leaked, "--max-leaked"},
                                      {&max_growth, &limits.max_growth_per_step, "--max-growth-per-step"}}) {
      if (text->empty()) continue;
      auto bytes = memtrace::parse_size(*text);
      if (!bytes) {
        std::fprintf(stderr, "memtrace check: %s: '%s' is not a size (try 4GiB)\n", flag, text->c_str());
        return kExitUsage;
      }
      *target = bytes;
    }
    if (*regression && check_baseline.empty()) {
      std::fprintf(stderr, "memtrace check: --max-regression needs --baseline\n");
      return kExitUsage;
    }
    if (!check_baseline.empty() && !*regression) {
      std::fprintf(stderr, "memtrace check: --baseline needs --max-regression PERCENT\n");
      return kExitUsage;
    }
    if (*regression) limits.max_regression_percent = max_regression;
    if (!limits.max_peak && !limits.max_leaked && !limits.max_growth_per_step && !limits.max_regression_percent) {
      std::fprintf(stderr, "memtrace check: give at least one limit (--max-peak, --max-leaked, "
                           "--max-growth-per-step, --baseline with --max-regression)\n");
      return kExitUsage;
    }
    std::vector<memtrace::ProcessAnalysis> processes, baseline;
    if (!load_analyses("check", check_cli, processes)) return kExitUsage;
    if (!check_baseline.empty()) {
      AnalysisCli b = check_cli;
      b.path = check_baseline;
      if (!load_analyses("check", b, baseline)) return kExitUsage;
    }
    memtrace::CheckResult result = memtrace::check(processes, limits, check_baseline.empty() ? nullptr : &baseline);
    if (!check_junit.empty() && !write_new_file("check", check_junit, memtrace::check_junit(result))) return kExitUsage;
    print(check_cli.json, result.json, memtrace::check_text(result));
    return result.passed ? 0 : 1;
  }
  return kExitUsage;
}
