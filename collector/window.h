// A stretch of a recording measured as it happens (memtrace's pytest plugin: one per test): the
// peak of each layer during it, and what it allocated and still holds at its end, with their
// largest sites, computed on the collector's replay in event order. A pass of the process's
// driver; opened and closed by memtrace.record's collector commands ("window begin", "window end").
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "memtrace/engine/pass.h"
#include "memtrace/format/trace_writer.h"

namespace memtrace {

class Window : public PassWithBefore {
 public:
  // STACKS: the process's trace, whose tables name the sites. HIDDEN_PYTHON_DIR: memtrace's own
  // Python files, never a site.
  Window(const TraceWriter& stacks, std::string hidden_python_dir)
      : stacks_(stacks), hidden_python_dir_(std::move(hidden_python_dir)) {}

  void begin(const Replay& replay, uint64_t t_ns);
  // The measures since begin(), as one line of JSON; the window closes.
  std::string end(const Replay& replay);

  void before(const Event& event, const Replay& replay) override;
  void on_event(const Event& event, const ReplayStep& step, const Replay& replay) override;

 private:
  struct Measure {
    uint64_t peak = 0, at_start = 0;
    bool peak_unsaved = false;                       // the sites at the newest peak are not copied yet
    std::unordered_map<uint64_t, uint64_t> at_peak;  // stack id -> bytes live at the peak
  };
  void save_peak(Measure& layer, bool allocated, const Replay& replay);
  std::string site_name(uint64_t stack_id) const;
  nlohmann::json sites_json(const std::unordered_map<uint64_t, uint64_t>& bytes_by_stack) const;

  const TraceWriter& stacks_;
  std::string hidden_python_dir_;
  bool open_ = false;
  uint64_t start_ns_ = 0;
  Measure reserved_, allocated_;
  bool allocated_layer_ = false;  // PyTorch (or an NVTX allocator) described one
};

}  // namespace memtrace
