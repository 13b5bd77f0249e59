// memtrace whatif PATH: the run's tensor requests replayed through PyTorch's caching allocator
// under other PYTORCH_CUDA_ALLOC_CONF settings: the reserved peak, segments, holes and
// out-of-memory each would give.
#include <memory>

#include "command.h"
#include "memtrace/base/units.h"
#include "memtrace/format/run_folder.h"
#include "memtrace/whatif/whatif.h"
#include "options.h"

namespace memtrace::cli {

namespace {

struct WhatIfCli {
  std::string path, alloc_conf, capacity, release;
  bool json = false;
  CLI::Option* alloc_conf_option = nullptr;
};

int whatif_run(WhatIfCli& c) {
  whatif::WhatIfOptions options;
  if (c.alloc_conf_option->count()) options.alloc_conf = c.alloc_conf;
  if (!c.release.empty()) options.release = c.release;
  if (!c.capacity.empty()) {
    auto bytes = parse_size(c.capacity);
    if (!bytes || !*bytes) {
      std::fprintf(stderr, "memtrace whatif: --capacity: '%s' is not a size (try 80GiB)\n", c.capacity.c_str());
      return kExitUsage;
    }
    options.capacity = *bytes;
  }
  std::string error;
  std::vector<std::string> traces = run_folder::find_traces_and_summaries(c.path, error);
  if (traces.empty()) {
    std::fprintf(stderr, "memtrace whatif: %s\n", error.c_str());
    return kExitUsage;
  }
  std::vector<whatif::ProcessWhatIf> processes;
  for (const std::string& trace : traces) {
    if (trace.size() > 7 && trace.compare(trace.size() - 7, 7, ".memsum") == 0) {
      std::fprintf(stderr, "memtrace whatif: %s is a summary: it keeps no tensor requests to replay; give the trace\n",
                   trace.c_str());
      return kExitUsage;
    }
    whatif::ProcessWhatIf p;
    if (!whatif::what_if(trace, options, p, error)) {
      if (traces.size() > 1 && error.find("no request to PyTorch's caching allocator") != std::string::npos)
        continue;  // a job's process that never used PyTorch
      std::fprintf(stderr, "memtrace whatif: %s\n", error.c_str());
      return kExitUsage;
    }
    processes.push_back(std::move(p));
  }
  if (processes.empty()) {
    std::fprintf(stderr, "memtrace whatif: no process of %s made a request to PyTorch's caching allocator\n",
                 c.path.c_str());
    return kExitUsage;
  }
  print(c.json, c.json ? whatif::to_json(processes) : nlohmann::json(),
        c.json ? std::string() : whatif::to_text(processes, options.alloc_conf.has_value()));
  return 0;
}

}  // namespace

Command add_whatif_command(CLI::App& app) {
  auto c = std::make_shared<WhatIfCli>();
  CLI::App* cmd = app.add_subcommand(
      "whatif",
      "Replay the run's tensor requests through PyTorch's caching allocator under other settings: the reserved "
      "peak, segments and out-of-memory each PYTORCH_CUDA_ALLOC_CONF would give, before anyone reruns the job");
  cmd->add_option("path", c->path, kRunPathHelp)->required();
  c->alloc_conf_option = cmd->add_option(
      "--alloc-conf", c->alloc_conf,
      "One setting, in PYTORCH_CUDA_ALLOC_CONF's own syntax (expandable_segments:True,max_split_size_mb:512); "
      "without it, a table of the usual candidates");
  cmd->add_option("--capacity", c->capacity,
                  "The device's memory (80GiB); default: the recorded device's total. Less what the run held "
                  "outside PyTorch's allocator at most is what the replay may reserve");
  cmd->add_option("--release", c->release,
                  "The PyTorch release whose rules to replay (2.6); default: the release that made the run");
  cmd->add_flag("--json", c->json, "JSON for scripts");
  return {cmd, [c] { return whatif_run(*c); }};
}

}  // namespace memtrace::cli
