#include "memtrace/analysis/explain.h"

#include <cmath>

#include "memtrace/analysis/units.h"

namespace memtrace {

namespace {

std::string read_difference(double difference, double expected) {
  double share = expected > 0 ? difference / expected : 0;
  if (std::fabs(share) < 0.05) return "as the formulas say (within 5%)";
  if (difference > 0)
    return "more than the formulas: the allocator's cache and fragmentation, library workspaces and buffers the "
           "formulas leave out";
  return "less than the formulas: the run held less than the options describe (a smaller batch or sequence, "
         "checkpointing, sharding), or ended before its steady state";
}

}  // namespace

Explanation explain(const Estimate& estimate, const std::vector<ProcessReport>& processes) {
  Explanation x;
  x.estimate = estimate;
  x.expected_reserved = estimate.total - estimate.component("cuda_context");
  for (const ProcessReport& p : processes) {
    for (const DeviceReport& d : p.devices) {
      Explanation::Measured m;
      m.pid = p.pid;
      m.device = d.device;
      m.reserved_peak = d.peak_bytes;
      m.difference = static_cast<double>(d.peak_bytes) - x.expected_reserved;
      m.reading = read_difference(m.difference, x.expected_reserved);
      x.measured.push_back(m);
    }
  }
  return x;
}

nlohmann::json explanation_json(const Explanation& x) {
  nlohmann::json measured = nlohmann::json::array();
  for (const auto& m : x.measured)
    measured.push_back({{"pid", m.pid},
                        {"device", m.device},
                        {"layers", {{"device", nullptr}, {"reserved", m.reserved_peak}, {"allocated", nullptr}}},
                        {"difference_bytes", static_cast<int64_t>(std::llround(m.difference))},
                        {"reading", m.reading}});
  return {{"estimate", estimate_json(x.estimate)},
          {"expected_reserved_bytes", static_cast<uint64_t>(std::llround(x.expected_reserved))},
          {"measured", measured},
          {"categories_known", x.categories_known}};
}

std::string explanation_text(const Explanation& x) {
  std::string out = estimate_text(x.estimate);
  out += "\nthe program itself should reserve about " + format_bytes(uint64_t(std::llround(x.expected_reserved))) +
         " per GPU (the total less the CUDA context)\n";
  for (const auto& m : x.measured) {
    double d = m.difference;
    out += "  process " + std::to_string(m.pid) + ", device " + std::to_string(m.device) + ": peak reserved " +
           format_bytes(m.reserved_peak) + ", " + (d >= 0 ? "+" : "-") +
           format_bytes(uint64_t(std::llround(std::fabs(d)))) + ": " + m.reading + "\n";
  }
  if (x.measured.empty()) out += "  the traces hold no device memory\n";
  out +=
      "\nparameters, gradients, optimizer state and activations measured one by one need PyTorch's allocated "
      "layer, which these traces do not hold; the device layer (nvidia-smi's figure) is measured at "
      "out-of-memory snapshots only.\n";
  return out;
}

}  // namespace memtrace
