// What `memtrace estimate` and `memtrace explain` share: the model and the run's options.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "memtrace/estimate/estimate.h"

namespace memtrace::cli {

struct EstimateCli {
  std::string model, config, params, micro_batch, gpu, gpu_memory, cuda_context, workspace, comm_buffers;
  EstimateOptions options;
  bool json = false;
  CLI::App* command = nullptr;  // to tell the options given from the defaults
};

void add_estimate_options(CLI::App* cmd, EstimateCli& e);
// The estimate E asks for: reads the model and the sizes, and computes it; prints one line and
// returns false when something is off.
bool estimate_from(const char* command, EstimateCli& e, Estimate& result);

}  // namespace memtrace::cli
