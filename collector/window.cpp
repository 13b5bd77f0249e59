#include "window.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "memtrace/engine/stacks.h"

namespace memtrace {

namespace {

constexpr size_t kSitesShown = 5;

template <typename Fn>
void for_each_live(const Replay& replay, bool allocated, Fn&& fn) {
  if (allocated) {
    for (const auto& [addr, region] : replay.regions()) fn(region);
  } else {
    replay.for_each_live([&](uint64_t, const LiveAllocation& a) {
      if (api_info(a.api).layer == Layer::kReserved && a.kind != MemKind::kPinnedHost) fn(a);
    });
  }
}

}  // namespace

void Window::begin(const Replay& replay, uint64_t t_ns) {
  open_ = true;
  start_ns_ = t_ns;
  reserved_ = Measure{replay.reserved_bytes(), replay.reserved_bytes(), true, {}};
  allocated_ = Measure{replay.allocated_bytes(), replay.allocated_bytes(), true, {}};
}

void Window::save_peak(Measure& layer, bool allocated, const Replay& replay) {
  layer.at_peak.clear();
  for_each_live(replay, allocated, [&](const LiveAllocation& a) { layer.at_peak[a.stack_id] += a.size; });
  layer.peak_unsaved = false;
}

// The first free after a new peak: what is live is still what was live at the peak.
void Window::before(const Event& event, const Replay& replay) {
  if (!open_ || event.op() != Op::kFree || !event.ok()) return;
  if (reserved_.peak_unsaved) save_peak(reserved_, false, replay);
  if (allocated_.peak_unsaved) save_peak(allocated_, true, replay);
}

void Window::on_event(const Event& event, const ReplayStep&, const Replay& replay) {
  if (event.layer == Layer::kAllocated && event.op() != Op::kMark) allocated_layer_ = true;
  if (!open_) return;
  if (replay.reserved_bytes() > reserved_.peak) {
    reserved_.peak = replay.reserved_bytes();
    reserved_.peak_unsaved = true;
  }
  if (replay.allocated_bytes() > allocated_.peak) {
    allocated_.peak = replay.allocated_bytes();
    allocated_.peak_unsaved = true;
  }
}

// The innermost frame of the user's code: a Python frame outside the standard library, installed
// packages and memtrace itself (with the user's Python frames that called it, up to three in all:
// "cuda.py:35 in malloc ← test_gpu.py:14 in test_big", so that a helper does not hide who called it),
// else the innermost native frame outside CUDA and PyTorch's plumbing, else the innermost frame
// (analysis/engine/stacks.h names sites by the same rules).
std::string Window::site_name(uint64_t stack_id) const {
  std::vector<FrameView> frames;
  for (const FrameInfo& f : stacks_.stack_frames(stack_id)) {
    FrameView& v = frames.emplace_back();
    v.python = f.python;
    v.function = f.function;
    v.file = f.file;
    v.line = f.line;
    v.module = f.module;
    v.offset = f.offset;
    v.address = f.address;
  }
  if (frames.empty()) return "(no stack)";
  auto mine = [&](const FrameView& f) {
    return !hidden_python_dir_.empty() && f.file.rfind(hidden_python_dir_, 0) == 0;
  };
  std::string chain;
  int named = 0;
  for (const FrameView& f : frames)
    if (f.python && !mine(f) && !StackView::is_python_library(f.file) && named++ < 3)
      chain += (chain.empty() ? "" : " ← ") + frame_label(f);
  if (!chain.empty()) return chain;
  for (const FrameView& f : frames)
    if (f.python && !mine(f)) return frame_label(f);
  for (const FrameView& f : frames)
    if (!StackView::is_library_frame(f) && !StackView::is_framework_plumbing(f) && !is_interpreter_frame(f))
      return frame_label(f);
  return frame_label(frames.front());
}

nlohmann::json Window::sites_json(const std::unordered_map<uint64_t, uint64_t>& bytes_by_stack) const {
  std::unordered_map<std::string, uint64_t> by_site;
  for (const auto& [stack_id, bytes] : bytes_by_stack) by_site[site_name(stack_id)] += bytes;
  std::vector<std::pair<std::string, uint64_t>> sites(by_site.begin(), by_site.end());
  std::sort(sites.begin(), sites.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < sites.size() && i < kSitesShown; ++i)
    out.push_back({{"bytes", sites[i].second}, {"location", sites[i].first}});
  return out;
}

std::string Window::end(const Replay& replay) {
  if (!open_) return R"({"error": "no window was begun"})";
  open_ = false;
  for (auto [layer, allocated] : {std::pair{&reserved_, false}, std::pair{&allocated_, true}})
    if (layer->peak_unsaved) save_peak(*layer, allocated, replay);
  // What the window allocated and still holds: live allocations made since it began.
  std::unordered_map<uint64_t, uint64_t> kept[2];
  uint64_t kept_bytes[2] = {0, 0};
  for (bool allocated : {false, true})
    for_each_live(replay, allocated, [&](const LiveAllocation& a) {
      if (a.t_ns < start_ns_) return;
      kept[allocated][a.stack_id] += a.size;
      kept_bytes[allocated] += a.size;
    });
  nlohmann::json out = {{"allocated_layer", allocated_layer_}};
  for (auto [name, layer, allocated] :
       {std::tuple{"reserved", &reserved_, false}, std::tuple{"allocated", &allocated_, true}})
    out[name] = {{"peak_bytes", layer->peak},
                 {"at_start_bytes", layer->at_start},
                 {"kept_bytes", kept_bytes[allocated]},
                 {"sites_at_peak", sites_json(layer->at_peak)},
                 {"kept_sites", sites_json(kept[allocated])}};
  return out.dump();
}

}  // namespace memtrace
