// `memtrace whatif` as text (one setting in full, or the candidates' table) and as JSON.
#include <algorithm>
#include <cstdio>

#include "memtrace/base/units.h"
#include "memtrace/whatif/whatif.h"

namespace memtrace::whatif {

namespace {

std::string conf_name(const std::string& conf) { return conf.empty() ? "(PyTorch's defaults)" : conf; }

std::string change(uint64_t predicted, uint64_t recorded) {
  if (!recorded) return "";
  char text[32];
  std::snprintf(text, sizeof text, "%+.1f%%", (static_cast<double>(predicted) / recorded - 1) * 100);
  return text;
}

std::string oom_text(const Prediction& p) {
  if (!p.oom) return "none";
  return "at " + format_duration_ns(p.oom->t_ns) + ", " + format_bytes(p.oom->requested) + " asked for at " +
         p.oom->line;
}

std::string header(const ProcessWhatIf& p) {
  std::string out = p.path + ": PyTorch " + (p.release.empty() ? "(release not recorded: 2.11's rules)" : p.release);
  out += ", PYTORCH_CUDA_ALLOC_CONF " +
         (!p.conf_known             ? std::string("not recorded (taken as PyTorch's defaults)")
          : p.recorded_conf.empty() ? std::string("unset")
                                    : "=" + p.recorded_conf) +
         "\n";
  return out;
}

std::string device_line(const DeviceWhatIf& d) {
  std::string out = "device " + std::to_string(d.device) + ": the run's reserved peak " +
                    format_bytes(d.reserved_peak) + " in " + counted(d.segments_at_peak, "segment") + ", " +
                    counted(d.requests, "allocation") + " replayed";
  if (d.recorded_ooms) out += "; the run ran out of memory " + counted(d.recorded_ooms, "time");
  out += "\n  ";
  if (d.capacity_known)
    out += "PyTorch's allocator may reserve " + format_bytes(d.capacity) + ": the device's " +
           format_bytes(d.device_total) + " less " + format_bytes(d.outside_most) +
           " held outside it at most (CUDA's context, other libraries, other processes)\n";
  else
    out += "the device's memory is not known: no out-of-memory is predicted (give --capacity)\n";
  return out;
}

void traps_text(const Prediction& p, std::string& out) {
  for (const std::string& t : p.traps) out += "    trap: " + t + "\n";
}

}  // namespace

std::string to_text(const std::vector<ProcessWhatIf>& processes, bool one_setting) {
  std::string out;
  for (const ProcessWhatIf& p : processes) {
    out += header(p);
    for (const DeviceWhatIf& d : p.devices) {
      out += device_line(d);
      if (one_setting) {
        const Prediction& q = d.predictions.front();
        out += "  " + conf_name(q.alloc_conf) + (q.as_recorded ? " (as the run had it)" : "") + "\n";
        out += "    predicted reserved peak " + format_bytes(q.reserved_peak) + " (" +
               change(q.reserved_peak, d.reserved_peak) + " on the run's), " + counted(q.segments_at_peak, "segment") +
               "\n";
        out += "    free inside them at the peak " + format_bytes(q.free_at_peak) + ", the largest hole " +
               format_bytes(q.largest_free_at_peak) + "\n";
        out += "    out of memory: " + oom_text(q) + "\n";
        if (q.placed_anew)
          out += "    " + counted(q.placed_anew, "block") +
                 " live before the recording began were placed anew, in address order (where they lay depends on "
                 "what came before)\n";
        traps_text(q, out);
        continue;
      }
      std::vector<const Prediction*> sorted;
      for (const Prediction& q : d.predictions) sorted.push_back(&q);
      std::stable_sort(sorted.begin(), sorted.end(), [](const Prediction* a, const Prediction* b) {
        if (a->oom.has_value() != b->oom.has_value()) return !a->oom;
        return a->reserved_peak < b->reserved_peak;
      });
      char line[512];
      std::snprintf(line, sizeof line, "  %-48s %12s %8s %9s %13s %13s  %s\n", "PYTORCH_CUDA_ALLOC_CONF",
                    "reserved peak", "vs run", "segments", "free at peak", "largest hole", "out of memory");
      out += line;
      for (const Prediction* q : sorted) {
        std::string name =
            conf_name(q->alloc_conf) + (q->as_recorded ? q->adopted ? " (as run)" : " (as run, placed anew)" : "");
        std::snprintf(line, sizeof line, "  %-48s %12s %8s %9llu %13s %13s  %s\n", name.c_str(),
                      format_bytes(q->reserved_peak).c_str(), change(q->reserved_peak, d.reserved_peak).c_str(),
                      static_cast<unsigned long long>(q->segments_at_peak), format_bytes(q->free_at_peak).c_str(),
                      format_bytes(q->largest_free_at_peak).c_str(), q->oom ? oom_text(*q).c_str() : "none");
        out += line;
      }
      for (const Prediction* q : sorted)
        if (q->as_recorded && !q->adopted)
          out += "  " + counted(q->placed_anew, "block") +
                 " live before the recording began are placed anew by every setting but the run's own (where they "
                 "lay depends on what came before): compare with \"(as run, placed anew)\"\n";
      out += "  Known traps:\n";
      std::vector<std::string> said;
      for (const Prediction* q : sorted)
        for (const std::string& t : q->traps)
          if (std::find(said.begin(), said.end(), t) == said.end()) {
            said.push_back(t);
            out += "    " + conf_name(q->alloc_conf) + ": " + t + "\n";
          }
      if (said.empty()) out += "    none of these settings\n";
    }
  }
  return out;
}

nlohmann::json to_json(const std::vector<ProcessWhatIf>& processes) {
  nlohmann::json doc = {{"processes", nlohmann::json::array()}};
  for (const ProcessWhatIf& p : processes) {
    nlohmann::json proc = {{"path", p.path},
                           {"release", p.release_known ? nlohmann::json(p.release) : nlohmann::json()},
                           {"alloc_conf", p.conf_known ? nlohmann::json(p.recorded_conf) : nlohmann::json()},
                           {"devices", nlohmann::json::array()}};
    for (const DeviceWhatIf& d : p.devices) {
      auto oom = [](const Prediction& q) {
        return q.oom
                   ? nlohmann::json{{"t_ns", q.oom->t_ns}, {"requested_bytes", q.oom->requested}, {"line", q.oom->line}}
                   : nlohmann::json();
      };
      nlohmann::json dev = {{"device", d.device},
                            {"reserved_peak_bytes", d.reserved_peak},
                            {"segments_at_peak", d.segments_at_peak},
                            {"segments_at_end", d.segments_at_end},
                            {"allocations", d.requests},
                            {"recorded_ooms", d.recorded_ooms},
                            {"capacity_bytes", d.capacity_known ? nlohmann::json(d.capacity) : nlohmann::json()},
                            {"outside_allocator_most_bytes", d.outside_most},
                            {"predictions", nlohmann::json::array()}};
      for (const Prediction& q : d.predictions)
        dev["predictions"].push_back({{"alloc_conf", q.alloc_conf},
                                      {"as_recorded", q.as_recorded},
                                      {"placed_as_recorded", q.adopted},
                                      {"predicted_reserved_peak_bytes", q.reserved_peak},
                                      {"segments_at_peak", q.segments_at_peak},
                                      {"segments_at_end", q.segments_at_end},
                                      {"free_at_peak_bytes", q.free_at_peak},
                                      {"largest_free_block_at_peak_bytes", q.largest_free_at_peak},
                                      {"placed_anew", q.placed_anew},
                                      {"predicted_oom", oom(q)},
                                      {"traps", q.traps}});
      if (!d.predictions.empty()) {  // the first setting's figures, where scripts look first
        dev["predicted_reserved_peak_bytes"] = d.predictions.front().reserved_peak;
        dev["predicted_oom"] = oom(d.predictions.front());
      }
      proc["devices"].push_back(dev);
    }
    doc["processes"].push_back(proc);
  }
  return doc;
}

}  // namespace memtrace::whatif
