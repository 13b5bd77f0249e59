// memtrace estimate: how much GPU memory a model needs to train or serve, from the standard formulas.
#include <cstdio>
#include <memory>

#include "command.h"
#include "estimate_options.h"
#include "options.h"

namespace memtrace::cli {

namespace {

int estimate_run(EstimateCli& e) {
  Estimate result;
  if (!estimate_from("estimate", e, result)) return kExitUsage;
  show(e.json, result);
  return 0;
}

}  // namespace

Command add_estimate_command(CLI::App& app) {
  auto e = std::make_shared<EstimateCli>();
  CLI::App* cmd =
      app.add_subcommand("estimate", "How much GPU memory a model needs to train or serve, from the standard formulas");
  add_estimate_options(cmd, *e);
  return {cmd, [e] { return estimate_run(*e); }};
}

}  // namespace memtrace::cli
