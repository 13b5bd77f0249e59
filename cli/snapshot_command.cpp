// memtrace snapshot PATH: what a snapshot (.memsnap) shows, diagnosis first.
#include <cstdio>
#include <memory>

#include "command.h"
#include "memtrace/format/run_folder.h"
#include "memtrace/views/snapshot_view.h"
#include "options.h"

namespace memtrace::cli {

namespace {

int show_snapshots(AnalysisCli& a) {
  a.options.grouping = grouping_named(a.by);
  std::string error;
  std::vector<std::string> files = run_folder::find_snapshots(a.path, error);
  if (files.empty()) {
    std::fprintf(stderr, "memtrace snapshot: %s\n", error.c_str());
    return kExitUsage;
  }
  SnapshotView view;
  if (!snapshot_view(files, a.options, view, error)) {
    std::fprintf(stderr, "memtrace snapshot: %s\n", error.c_str());
    return kExitUsage;
  }
  show(a.json, view);
  return 0;
}

}  // namespace

Command add_snapshot_command(CLI::App& app) {
  auto a = std::make_shared<AnalysisCli>();
  CLI::App* cmd =
      app.add_subcommand("snapshot", "What a snapshot (.memsnap) shows: the diagnosis, then the largest sites");
  cmd->add_option("path", a->path, "A .memsnap file, or a folder of them")->required();
  cmd->add_flag("--json", a->json, "Print JSON instead of text");
  cmd->add_option("--top", a->options.top_sites, "How many sites to show (default 10)")->check(CLI::Range(1, 100000));
  add_by_option(cmd, a->by);
  cmd->add_flag("--keep-cuda-frames", a->options.keep_cuda_frames,
                "Show frames inside the CUDA libraries at the top of stacks");
  return {cmd, [a] { return show_snapshots(*a); }};
}

}  // namespace memtrace::cli
