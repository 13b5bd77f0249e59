// "Who held the device": the owners at a device's reserved peak as text and JSON, for peak
// --by owner and the report.
#include "memtrace/base/units.h"
#include "memtrace/views/report_render.h"

namespace memtrace {

uint64_t owners_total(const DeviceReport& d) {
  uint64_t sum = 0;
  for (const OwnerShare& o : d.owners_at_peak) sum += o.bytes;
  return sum;
}

// NVML's figure for this process at its most (nvidia-smi's), where the driver gave it, and the
// owners' rows at the peak it should match: all but other processes'.

nlohmann::json owners_json(const DeviceReport& d) {
  const uint64_t whole = d.device_samples ? d.device_at_peak_bytes() : d.peak_bytes;
  const bool nvml = d.device_samples && d.outside_parts_at_peak.other_processes_known;
  return {
      // This process at its most as NVML counted it (nvidia-smi's figure), null where it did not.
      {"nvml_process_most_bytes",
       nvml ? nlohmann::json(d.outside_parts_at_peak.nvml_process) : nlohmann::json(nullptr)},
      // The device layer's most sample, less other processes: what NVML's figure was read beside.
      {"device_most_sampled_less_others_bytes",
       nvml ? nlohmann::json(d.device_used_max_sampled_bytes -
                             std::min(d.device_used_max_sampled_bytes, d.outside_parts_at_peak.other_processes))
            : nlohmann::json(nullptr)},
      {"owners", owner_rows_json(d.owners_at_peak, whole)},
      {"owners_total_bytes", owners_total(d)},
      // What they add up to: the device layer at the peak when it was sampled, else the reserved peak.
      {"device_at_peak_bytes", d.device_samples ? nlohmann::json(d.device_at_peak_bytes()) : nlohmann::json(nullptr)},
      {"device_sampled", d.device_samples > 0}};
}

std::string owners_text(const std::vector<OwnerShare>& rows, uint64_t whole, const std::string& in_all, int indent) {
  const std::string in(static_cast<size_t>(indent), ' ');
  uint64_t sum = 0;
  for (const OwnerShare& o : rows) sum += o.bytes;
  std::string out = in + pad("bytes", 11, true) + pad("share", 8, true) + pad("count", 8, true) + "  owner\n";
  for (const OwnerShare& o : rows) {
    out += in + pad(format_bytes(o.bytes), 11, true) + pad(percent(o.bytes, whole), 8, true) +
           pad(o.count ? std::to_string(o.count) : "", 8, true) + "  " + o.owner +
           (o.why.empty() ? "" : " (" + o.why + ")") + "\n";
    if (o.parts.size() > 1 || (o.parts.size() == 1 && o.kind == OwnerKind::kLibrary))
      for (const OwnerPart& p : o.parts)
        out += in + pad(format_bytes(p.bytes), 11, true) + pad("", 8, true) + pad(std::to_string(p.count), 8, true) +
               "    " + p.name + "\n";
  }
  return out + in + pad(format_bytes(sum), 11, true) + pad(percent(sum, whole), 8, true) + pad("", 8, true) + "  " +
         in_all + "\n";
}

std::string owners_text(const DeviceReport& d, int indent) {
  const uint64_t whole = d.device_samples ? d.device_at_peak_bytes() : d.peak_bytes;
  // NVML's figure, as nvidia-smi shows it: read with the device layer's samples (a tenth of a
  // second apart, and whenever the device's use grew by 1%), so at most what they found.
  std::string nvml_line;
  if (d.device_samples && d.outside_parts_at_peak.other_processes_known)
    nvml_line = std::string(static_cast<size_t>(indent), ' ') +
                "this process at its most as NVML counted it (nvidia-smi): " +
                format_bytes(d.outside_parts_at_peak.nvml_process) +
                "; by the device layer's most sample, less other processes: " +
                format_bytes(d.device_used_max_sampled_bytes -
                             std::min(d.device_used_max_sampled_bytes, d.outside_parts_at_peak.other_processes)) +
                "\n";
  return owners_text(d.owners_at_peak, whole,
                     d.device_samples ? "in all: the device at the peak (" + format_bytes(whole) +
                                            ", by its sample at " + format_duration_ns(d.outside_sampled_at_ns) + ")"
                                      : "in all: the reserved peak (the device layer was not sampled: the CUDA context "
                                        "and what no allocation API made are not known)",
                     indent) +
         nvml_line;
}

nlohmann::json owner_rows_json(const std::vector<OwnerShare>& rows, uint64_t whole) {
  nlohmann::json out = nlohmann::json::array();
  for (const OwnerShare& o : rows) {
    nlohmann::json parts = nlohmann::json::array();
    for (const OwnerPart& p : o.parts) parts.push_back({{"call", p.name}, {"bytes", p.bytes}, {"count", p.count}});
    nlohmann::json row = {{"owner", o.owner},
                          {"kind", owner_kind_name(o.kind)},
                          {"bytes", o.bytes},
                          {"count", o.count},
                          {"share", whole ? static_cast<double>(o.bytes) / static_cast<double>(whole) : 0.0},
                          {"why", o.why},
                          {"parts", parts}};
    if (o.kind == OwnerKind::kPyTorchPool) row["tensors_bytes"] = o.tensors_bytes;
    out.push_back(std::move(row));
  }
  return out;
}

}  // namespace memtrace
