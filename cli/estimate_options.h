// What `memtrace estimate` and `memtrace explain` share: the model and the run's options.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "memtrace/analysis/estimate.h"

namespace memtrace::cli {

struct EstimateCli {
  std::string model, config, params, micro_batch, gpu, gpu_memory, cuda_context, workspace, comm_buffers;
  EstimateOptions options;
  bool json = false;
};

void add_estimate_options(CLI::App* cmd, EstimateCli& e);
// Reads the model and the sizes into MODEL and E.options; prints one line and returns false when
// something is off.
bool resolve_estimate(const char* command, EstimateCli& e, ModelShape& model);

}  // namespace memtrace::cli
