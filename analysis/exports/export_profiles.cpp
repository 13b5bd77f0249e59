#include "memtrace/exports/export_profiles.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "memtrace/engine/pass.h"
#include "memtrace/engine/trace_set.h"

namespace memtrace {

namespace {

// A flame graph's frame: the function (lines would split one function into many boxes), the
// Python file beside it; without a name, where it is. No ';' (the separator) nor newline.
std::string folded_frame(const FrameView& f) {
  std::string label = f.function.empty() ? frame_label(f)
                      : f.python         ? f.function + " (" + std::filesystem::path(f.file).filename().string() + ")"
                                         : f.function;
  for (char& c : label)
    if (c == ';' || c == '\n') c = ':';
  return label;
}

}  // namespace

std::string export_folded(const std::vector<ProcessAnalysis>& processes, bool at_peak) {
  std::string out;
  for (const ProcessAnalysis& p : processes)
    for (const DeviceReport& d : p.report.devices)
      for (const SiteTotal& s : at_peak ? d.peak_sites : d.exit_sites) {
        std::string line = "pid " + std::to_string(p.report.pid) + ";device " + std::to_string(d.device);
        for (auto f = s.stack.rbegin(); f != s.stack.rend(); ++f) line += ";" + folded_frame(*f);
        line += ";" + std::string(api_name(s.site.api));
        out += line + " " + std::to_string(s.bytes) + "\n";
      }
  return out;
}

bool export_chrome(const std::vector<std::string>& traces, std::FILE* out, std::vector<std::string>& warnings,
                   std::string& error) {
  std::fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n", out);
  bool first = true;
  auto emit = [&](const nlohmann::json& e) {
    std::fputs(first ? "" : ",\n", out);
    first = false;
    std::fputs(e.dump().c_str(), out);
  };
  for (const std::string& path : traces) {
    std::unique_ptr<TraceReader> reader = open_trace(path, error);
    if (!reader) return false;
    const int pid = reader->header().pid();
    std::string name;
    for (const auto& arg : reader->header().command()) name += (name.empty() ? "" : " ") + arg;
    emit({{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"args", {{"name", name}}}});
    FunctionPass process([&](const Event& e, const ReplayStep& step, const Replay& replay) {
      const double ts = static_cast<double>(e.t_ns) / 1000.0;  // microseconds
      const std::string api(api_name(e.api));
      if (e.op() == Op::kMark) {
        std::string label(reader->string(e.name));
        switch (e.api) {
          case Api::kNvtxMark:
            emit({{"ph", "i"}, {"s", "t"}, {"name", label}, {"pid", pid}, {"tid", e.tid}, {"ts", ts}});
            break;
          case Api::kNvtxRangePush:
            emit({{"ph", "B"}, {"name", label}, {"pid", pid}, {"tid", e.tid}, {"ts", ts}});
            break;
          case Api::kNvtxRangePop: emit({{"ph", "E"}, {"pid", pid}, {"tid", e.tid}, {"ts", ts}}); break;
          case Api::kNvtxRangeStart:
            emit({{"ph", "b"},
                  {"cat", "nvtx"},
                  {"name", label},
                  {"id", e.addr},
                  {"pid", pid},
                  {"tid", e.tid},
                  {"ts", ts}});
            break;
          case Api::kNvtxRangeEnd:
            emit({{"ph", "e"}, {"cat", "nvtx"}, {"id", e.addr}, {"pid", pid}, {"tid", e.tid}, {"ts", ts}});
            break;
          default: break;
        }
        return;
      }
      for (const MemoryChange& c : step.memory_changes) {
        emit({{"ph", "C"},
              {"name", "device " + std::to_string(c.device) + " " + std::string(layer_name(c.layer))},
              {"pid", pid},
              {"ts", ts},
              {"args", {{"bytes", replay.live_bytes(c.layer, c.device)}}}});
        // Allocations as async events from allocation to free, on their layer's category.
        char id[32];
        std::snprintf(id, sizeof id, "0x%llx", static_cast<unsigned long long>(c.addr));
        nlohmann::json a = {{"ph", c.arrived ? "b" : "e"},
                            {"cat", std::string(layer_name(c.layer))},
                            {"id", id},
                            {"pid", pid},
                            {"tid", e.tid},
                            {"ts", ts}};
        if (c.arrived) {
          a["name"] = api;
          a["args"] = {{"bytes", c.bytes}, {"device", c.device}};
        } else {
          a["name"] = std::string(api_name(c.site.api));
        }
        emit(a);
      }
      if (!e.ok() && e.op() == Op::kAlloc)
        emit({{"ph", "i"},
              {"s", "p"},
              {"name", api + " failed"},
              {"pid", pid},
              {"tid", e.tid},
              {"ts", ts},
              {"args", {{"bytes", e.size}, {"result", e.result}}}});
    });
    PassDriver().add(process).run(*reader);
    if (!reader->footer() && !reader->problem().empty()) warnings.push_back(path + ": " + reader->problem());
  }
  std::fputs("\n]}\n", out);
  return true;
}

}  // namespace memtrace
