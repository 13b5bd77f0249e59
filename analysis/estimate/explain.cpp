#include "memtrace/estimate/explain.h"

#include <cmath>

#include "memtrace/base/units.h"

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

// What the formulas expect of a category; none for those they do not name.
std::optional<double> expected_of(const Estimate& e, Category c) {
  switch (c) {
    case Category::kParameter: return e.component("weights");
    case Category::kGradient: return e.component("gradients");
    case Category::kOptimizerState: return e.component("optimizer_state") + e.component("master_weights");
    case Category::kActivation: return e.component("activations") + e.component("logits");
    default: return std::nullopt;
  }
}

}  // namespace

Explanation explain(const Estimate& estimate, const std::vector<ProcessAnalysis>& processes) {
  Explanation x;
  x.estimate = estimate;
  x.expected_reserved = estimate.total - estimate.component("cuda_context");
  for (const ProcessAnalysis& p : processes) {
    x.categories_known |= p.categories_known;
    for (const DeviceReport& d : p.report.devices) {
      Explanation::Measured m;
      m.pid = p.report.pid;
      m.device = d.device;
      m.reserved_peak = d.peak_bytes;
      m.difference = static_cast<double>(d.peak_bytes) - x.expected_reserved;
      m.reading = read_difference(m.difference, x.expected_reserved);
      for (const DeviceReport& a : p.allocated.devices) {
        if (a.device != d.device || !p.has_allocated) continue;
        m.allocated_peak = a.peak_bytes;
        if (p.categories_known)
          for (const CategoryTotal& c : a.peak_categories)
            m.categories.push_back({c.category, c.bytes, expected_of(estimate, c.category)});
      }
      x.measured.push_back(m);
    }
  }
  return x;
}

nlohmann::json to_json(const Explanation& x) {
  nlohmann::json measured = nlohmann::json::array();
  for (const auto& m : x.measured) {
    nlohmann::json categories = nlohmann::json::array();
    for (const auto& c : m.categories)
      categories.push_back(
          {{"category", std::string(category_name(c.category))},
           {"measured_bytes", c.measured},
           {"expected_bytes", c.expected ? nlohmann::json(std::llround(*c.expected)) : nlohmann::json()}});
    measured.push_back({{"pid", m.pid},
                        {"device", m.device},
                        {"layers",
                         {{"device", nullptr},
                          {"reserved", m.reserved_peak},
                          {"allocated", m.allocated_peak ? nlohmann::json(*m.allocated_peak) : nlohmann::json()}}},
                        {"categories", categories},
                        {"difference_bytes", static_cast<int64_t>(std::llround(m.difference))},
                        {"reading", m.reading}});
  }
  return {{"estimate", to_json(x.estimate)},
          {"expected_reserved_bytes", static_cast<uint64_t>(std::llround(x.expected_reserved))},
          {"measured", measured},
          {"categories_known", x.categories_known}};
}

std::string to_text(const Explanation& x) {
  std::string out = to_text(x.estimate);
  out += "\nthe program itself should reserve about " + format_bytes(uint64_t(std::llround(x.expected_reserved))) +
         " per GPU (the total less the CUDA context)\n";
  for (const auto& m : x.measured) {
    double d = m.difference;
    out += "  process " + std::to_string(m.pid) + ", device " + std::to_string(m.device) + ": peak reserved " +
           format_bytes(m.reserved_peak) + ", " + (d >= 0 ? "+" : "-") +
           format_bytes(uint64_t(std::llround(std::fabs(d)))) + ": " + m.reading + "\n";
    if (m.allocated_peak) out += "    peak allocated to tensors " + format_bytes(*m.allocated_peak) + "\n";
    for (const auto& c : m.categories)
      out += "      " + std::string(category_name(c.category)) + ": " + format_bytes(c.measured) +
             (c.expected ? " (the formulas: " + format_bytes(uint64_t(std::llround(*c.expected))) + ")" : "") + "\n";
  }
  if (x.measured.empty()) out += "  the traces hold no device memory\n";
  if (!x.categories_known)
    out +=
        "\nparameters, gradients, optimizer state and activations measured one by one need PyTorch's allocated "
        "layer (a PyTorch program run under memtrace), which these traces do not hold; ";
  else
    out += "\n";
  out += "the device layer (nvidia-smi's figure) is measured at out-of-memory snapshots only.\n";
  return out;
}

}  // namespace memtrace
