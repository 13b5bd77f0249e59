// memtrace verify PATH: what a --verify run recorded, held against CUPTI's own memory records.
// Exit 0 when they agree, 1 when one side saw an allocation the other did not, 2 for bad use, an
// unreadable trace, or a trace with no CUPTI records to compare with.
#include <cstdio>
#include <memory>

#include "command.h"
#include "memtrace/engine/trace_set.h"
#include "memtrace/format/run_folder.h"
#include "memtrace/views/verify.h"
#include "options.h"

namespace memtrace::cli {

namespace {

struct VerifyCli {
  std::string path;
  bool json = false;
  size_t max_listed = 20;
};

int verify_run(const VerifyCli& c) {
  std::string error;
  std::vector<std::string> paths = run_folder::find_traces(c.path, error);
  if (paths.empty()) {
    std::fprintf(stderr, "memtrace verify: %s\n", error.c_str());
    return kExitUsage;
  }
  VerifyView view;
  for (const std::string& path : paths) {
    VerifyResult r;
    if (!verify_trace(path, c.max_listed, r, error)) {
      std::fprintf(stderr, "memtrace verify: %s\n", error.c_str());
      return kExitUsage;
    }
    view.processes.push_back(std::move(r));
  }
  show(c.json, view);
  return !view.compared() ? kExitUsage : view.agree() ? 0 : 1;
}

}  // namespace

Command add_verify_command(CLI::App& app) {
  auto c = std::make_shared<VerifyCli>();
  CLI::App* cmd = app.add_subcommand(
      "verify", "Hold a --verify run's record against CUPTI's own: exit 0 when they agree, 1 when not, 2 for bad use");
  cmd->add_option("path", c->path, "A --verify run's folder or .memtrace file")->required();
  cmd->add_flag("--json", c->json, "Print JSON");
  cmd->add_option("--max-listed", c->max_listed, "Allocations listed per side and process (default 20)")
      ->check(CLI::Range(0, 100000));
  return {cmd, [c] { return verify_run(*c); }};
}

}  // namespace memtrace::cli
