#include "memtrace/engine/torch_counters.h"

#include <algorithm>

namespace memtrace {

std::optional<int64_t> TorchCounters::rounding_at_peak() const {
  auto allocated = figures.find("allocated_bytes.all.peak"), requested = figures.find("requested_bytes.all.peak");
  if (allocated == figures.end() || requested == figures.end() || requested->second == 0) return std::nullopt;
  return allocated->second - requested->second;
}

void TorchCounterTracker::add(const Event& e, const ReplayStep& step, std::string_view name) {
  if (e.api == Api::kTorchCounter) {
    Device& d = devices_[e.device];
    if (name == "reset_peak") {  // torch.cuda.reset_peak_memory_stats: PyTorch's peaks start again
      close(d);
      d.requested_peak = d.requested;
      d.segments_peak = d.segments;
      d.reset = true;
      return;
    }
    size_t colon = name.find(':');
    if (colon == std::string_view::npos) return;
    std::string when(name.substr(0, colon)), figure(name.substr(colon + 1));
    if (d.open && (d.open->when != when || d.open->figures.count(figure))) close(d);
    if (!d.open) {
      d.open = TorchCounters();
      d.open->device = e.device;
      d.open->when = when;
      d.open->t_ns = e.t_ns;
      d.open->reset_seen = d.reset;
      // memtrace's figures as of this moment.
      auto check = [&](const char* f, std::optional<int64_t> v) { d.open->checks.push_back({f, 0, v}); };
      auto tensors = [&](int64_t v) { return tensors_seen_ ? std::optional<int64_t>(v) : std::nullopt; };
      auto segments = [&](int64_t v) { return segments_seen_ ? std::optional<int64_t>(v) : std::nullopt; };
      check("requested_bytes.all.current", tensors(d.requested));
      check("requested_bytes.all.peak", tensors(d.requested_peak));
      check("reserved_bytes.all.current", segments(d.segments));
      check("reserved_bytes.all.peak", segments(d.segments_peak));
      check("num_ooms", tensors(static_cast<int64_t>(d.ooms)));
    }
    d.open->figures[figure] = static_cast<int64_t>(e.size);
    return;
  }
  if (!from_pytorch(e.api) || !e.ok()) {
    if (e.api == Api::kTorchOom) ++devices_[e.device].ooms;
    return;
  }
  auto grow = [](int64_t& now, int64_t& peak, int64_t by) {
    now += by;
    peak = std::max(peak, now);
  };
  if (e.api == Api::kTorchSegmentAlloc || e.api == Api::kTorchSegmentMap) {
    segments_seen_ = true;
    Device& d = devices_[step.device];
    grow(d.segments, d.segments_peak, static_cast<int64_t>(e.size));
  } else if (e.api == Api::kTorchSegmentFree || e.api == Api::kTorchSegmentUnmap) {
    devices_[step.device].segments -= static_cast<int64_t>(e.size);
  }
  for (const MemoryChange& c : step.memory_changes)
    if (c.layer == Layer::kAllocated && c.site.api == Api::kTorchAlloc) {
      tensors_seen_ = true;
      Device& d = devices_[c.device];
      grow(d.requested, d.requested_peak, c.bytes);
    }
}

void TorchCounterTracker::close(Device& d) {
  if (!d.open) return;
  TorchCounters c = std::move(*d.open);
  d.open.reset();
  std::vector<TorchCounterCheck> checks;
  for (TorchCounterCheck& check : c.checks)
    if (auto f = c.figures.find(check.figure); f != c.figures.end()) {
      check.pytorch = f->second;
      checks.push_back(check);
    }
  c.checks = std::move(checks);
  if (c.when == "oom")
    ooms_.push_back(std::move(c));
  else
    d.at_exit = std::move(c);
}

std::vector<TorchCounters> TorchCounterTracker::finish() {
  std::vector<TorchCounters> out;
  for (auto& [device, d] : devices_) {
    close(d);
    if (d.at_exit) out.push_back(std::move(*d.at_exit));
  }
  for (TorchCounters& c : ooms_) out.push_back(std::move(c));
  return out;
}

}  // namespace memtrace
