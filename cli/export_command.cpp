// memtrace export --format jsonl|folded|chrome|perfetto|memory-viz PATH: every event, or stacks,
// or a Chrome or Perfetto trace, or a PyTorch memory snapshot, for other tools.
#include <unistd.h>

#include <cstdio>
#include <memory>

#include "command.h"
#include "memtrace/engine/trace_set.h"
#include "memtrace/exports/export_jsonl.h"
#include "memtrace/exports/export_memory_viz.h"
#include "memtrace/exports/export_profiles.h"
#include "memtrace/format/run_folder.h"
#include "options.h"

namespace memtrace::cli {

namespace {

struct ExportCli {
  std::string path, format = "jsonl", output, at = "peak";
  bool keep_cuda = false;
  size_t max_entries = MemoryVizOptions().max_entries;
};

int export_memory_viz(const ExportCli& c) {
  if (c.output.empty() || c.output == "-") {
    std::fprintf(stderr, "memtrace export: --format memory-viz needs -o FILE (FILE.pickle, or FILE.json for JSON)\n");
    return kExitUsage;
  }
  std::string error;
  std::vector<std::string> traces = run_folder::find_traces(c.path, error);
  if (traces.empty()) {
    std::fprintf(stderr, "memtrace export: %s\n", error.c_str());
    return kExitUsage;
  }
  if (traces.size() > 1) {
    std::fprintf(stderr, "memtrace export: a memory-viz snapshot holds one process, and %s holds %zu: name one of\n",
                 c.path.c_str(), traces.size());
    for (const auto& t : traces) std::fprintf(stderr, "  %s\n", t.c_str());
    return kExitUsage;
  }
  MemoryVizOptions options;
  options.max_entries = c.max_entries;
  options.keep_cuda_frames = c.keep_cuda;
  options.json = c.output.size() > 5 && c.output.compare(c.output.size() - 5, 5, ".json") == 0;
  std::string document;
  std::vector<std::string> warnings;
  bool ok = memtrace::export_memory_viz(traces.front(), options, document, warnings, error);
  for (const auto& w : warnings) std::fprintf(stderr, "memtrace export: %s\n", w.c_str());
  if (!ok) {
    std::fprintf(stderr, "memtrace export: %s\n", error.c_str());
    return kExitUsage;
  }
  return write_report_file("export", c.output, document) ? 0 : 1;
}

int export_folded(const ExportCli& c) {
  AnalysisCli a;
  a.path = c.path;
  a.by = "stack";
  a.options.keep_cuda_frames = c.keep_cuda;
  a.options.top_sites = SIZE_MAX;
  std::vector<ProcessAnalysis> processes;
  if (!load_analyses("export", a, processes)) return kExitUsage;
  std::string text = memtrace::export_folded(processes, c.at == "peak");
  if (c.output.empty() || c.output == "-") {
    std::fputs(text.c_str(), stdout);
    return 0;
  }
  return write_report_file("export", c.output, text) ? 0 : 1;
}

int export_events(const ExportCli& c) {
  if (c.format != "jsonl" && c.format != "folded" && c.format != "chrome" && c.format != "perfetto" &&
      c.format != "memory-viz") {
    std::fprintf(stderr, "memtrace export: unknown format '%s' (known: jsonl, folded, chrome, perfetto, memory-viz)\n",
                 c.format.c_str());
    return kExitUsage;
  }
  if (c.format == "perfetto" && (c.output.empty() || c.output == "-") && ::isatty(STDOUT_FILENO)) {
    std::fprintf(stderr, "memtrace export: a Perfetto trace is binary: write it to a file (-o FILE.pftrace)\n");
    return kExitUsage;
  }
  if (c.format == "folded") return export_folded(c);
  if (c.format == "memory-viz") return export_memory_viz(c);
  std::string error;
  std::vector<std::string> traces = run_folder::find_traces(c.path, error);
  if (traces.empty()) {
    std::fprintf(stderr, "memtrace export: %s\n", error.c_str());
    return kExitUsage;
  }
  ReportFile file;
  std::FILE* out = file.open("export", c.output);
  if (!out) return 1;
  std::vector<std::string> warnings;
  bool ok = c.format == "chrome"     ? export_chrome(traces, out, warnings, error)
            : c.format == "perfetto" ? export_perfetto(traces, out, warnings, error)
                                     : export_jsonl(traces, out, c.keep_cuda, warnings, error);
  for (const auto& w : warnings) std::fprintf(stderr, "memtrace export: %s\n", w.c_str());
  if (!ok) std::fprintf(stderr, "memtrace export: %s\n", error.c_str());
  return ok && file.commit() ? 0 : 1;
}

}  // namespace

Command add_export_command(CLI::App& app) {
  auto c = std::make_shared<ExportCli>();
  CLI::App* cmd = app.add_subcommand("export", "Write every event in a format other tools read");
  cmd->add_option("path", c->path, kRunPathHelp)->required();
  cmd->add_option("--format", c->format,
                  "jsonl: one JSON object per event; folded: stacks for flame graphs (flamegraph.pl, "
                  "speedscope); chrome: a Chrome trace (JSON); perfetto: a Perfetto trace (protobuf, for "
                  "ui.perfetto.dev, smaller "
                  "and faster to load than chrome's); memory-viz: a PyTorch memory snapshot for "
                  "pytorch.org/memory_viz (a pickle; JSON when FILE ends in .json)")
      ->required();
  cmd->add_option("--max-entries", c->max_entries,
                  "memory-viz: the events kept per device, the last ones, as PyTorch's max_entries (default "
                  "200000; the viewer slows down past a few hundred thousand)")
      ->check(CLI::Range(size_t(1), size_t(1) << 40));
  cmd->add_option("--at", c->at, "folded: what was live at the peak (default) or at the end")
      ->check(CLI::IsMember({"peak", "end"}));
  cmd->add_option("-o,--output", c->output, "Output file (default: standard output)");
  cmd->add_flag("--keep-cuda-frames", c->keep_cuda, "Keep frames inside the CUDA libraries in stacks");
  return {cmd, [c] { return export_events(*c); }};
}

}  // namespace memtrace::cli
