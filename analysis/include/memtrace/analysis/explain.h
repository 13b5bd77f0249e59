// `memtrace explain`: what a trace measured, held against the estimate for the same model and
// options, with the difference named.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "memtrace/analysis/estimate.h"
#include "memtrace/analysis/report.h"

namespace memtrace {

struct Explanation {
  Estimate estimate;
  // What the estimate expects the program itself to allocate (everything but the CUDA context,
  // which is no allocation), against what each process's devices reserved at their peak.
  double expected_reserved = 0;
  struct Measured {
    int32_t pid = 0;
    int32_t device = -1;
    uint64_t reserved_peak = 0;
    double difference = 0;  // measured minus expected
    std::string reading;    // what the difference is, in words
  };
  std::vector<Measured> measured;
  bool categories_known = false;  // parameters/gradients/... measured (needs the PyTorch layer)
};

Explanation explain(const Estimate& estimate, const std::vector<ProcessReport>& processes);
nlohmann::json explanation_json(const Explanation& e);
std::string explanation_text(const Explanation& e);

}  // namespace memtrace
