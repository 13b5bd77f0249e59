// `memtrace explain`: what a trace measured, held against the estimate for the same model and
// options, with the difference named.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "memtrace/engine/process_analysis.h"
#include "memtrace/estimate/estimate.h"

namespace memtrace {

struct Explanation {
  Estimate estimate;
  // What the estimate expects the program itself to allocate (everything but the CUDA context,
  // which is no allocation), against what each process's devices reserved at their peak.
  double expected_reserved = 0;
  // What one category held at the allocated layer's peak, beside what the estimate expects of it
  // (none for categories the formulas do not name: temporaries, inputs, other).
  struct CategoryRow {
    Category category = Category::kUnknown;
    uint64_t measured = 0;
    std::optional<double> expected;
  };
  struct Measured {
    int32_t pid = 0;
    int32_t device = -1;
    uint64_t reserved_peak = 0;
    double difference = 0;                   // measured minus expected
    std::string reading;                     // what the difference is, in words
    std::optional<uint64_t> allocated_peak;  // PyTorch's tensors, when recorded
    std::vector<CategoryRow> categories;     // at that peak, when known
  };
  std::vector<Measured> measured;
  bool categories_known = false;  // parameters/gradients/... measured (needs PyTorch's allocated layer)
};

Explanation explain(const Estimate& estimate, const std::vector<ProcessAnalysis>& processes);
nlohmann::json to_json(const Explanation& e);
std::string to_text(const Explanation& e);

}  // namespace memtrace
