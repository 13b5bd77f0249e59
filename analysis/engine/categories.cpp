#include "memtrace/engine/categories.h"

#include <algorithm>
#include <iterator>

namespace memtrace {

namespace {
constexpr std::string_view kBackward = "backward", kOptimizerStep = "optimizer.step";
}

std::string_view category_name(Category c) {
  auto i = static_cast<size_t>(c);
  return i < std::size(kCategoryNames) ? kCategoryNames[i] : "unknown";
}

Category category_named(std::string_view name) {
  for (size_t i = 0; i < std::size(kCategoryNames); ++i)
    if (kCategoryNames[i] == name) return static_cast<Category>(i);
  return Category::kUnknown;
}

CategoryTracker::Phase CategoryTracker::phase() const {
  return backward_open_ ? Phase::kBackward : optimizer_open_ ? Phase::kOptimizer : Phase::kForward;
}

void CategoryTracker::add(const Event& e, const ReplayStep& step, const Replay& replay, uint64_t step_index,
                          std::string_view name) {
  switch (e.api) {
    case Api::kShimRangePush: {
      Phase opened = name == kBackward        ? Phase::kBackward
                     : name == kOptimizerStep ? Phase::kOptimizer
                                              : Phase::kForward;
      ranges_[e.tid].push_back(opened);
      if (opened == Phase::kBackward) {
        known_ = true;
        ++backward_open_;
        ++backwards_;
      } else if (opened == Phase::kOptimizer) {
        ++optimizer_open_;
      }
      return;
    }
    case Api::kShimRangePop: {
      auto it = ranges_.find(e.tid);
      if (it == ranges_.end() || it->second.empty()) return;
      Phase closed = it->second.back();
      it->second.pop_back();
      if (closed == Phase::kBackward && backward_open_) --backward_open_;
      if (closed == Phase::kOptimizer && optimizer_open_) --optimizer_open_;
      return;
    }
    case Api::kTorchCategory: {
      known_ = true;
      auto it = live_.upper_bound(e.addr);  // the block the tensor's address lies in
      if (it == live_.begin()) return;
      --it;
      if (e.addr < it->first + it->second.size) it->second.tag = static_cast<int8_t>(category_named(name));
      return;
    }
    default: break;
  }
  for (const MemoryChange& c : step.memory_changes) {
    if (c.layer != Layer::kAllocated) continue;
    if (c.arrived) {
      live_[c.addr] = Block{next_id_++, static_cast<uint64_t>(c.bytes), c.device, step_index, phase(), backwards_};
      if (keep_all_) all_.push_back(Category::kUnknown);
      DevicePeak& p = peaks_[c.device];
      uint64_t now = replay.live_bytes(Layer::kAllocated, c.device);
      if (now > p.bytes) {
        p.bytes = now;
        p.unsaved = true;
      }
      continue;
    }
    // The first free after a new peak: what is live is still what was live at the peak.
    if (peaks_[c.device].unsaved) save_peak(c.device);
    auto it = live_.find(c.addr);
    if (it == live_.end()) continue;
    settle(it->second, decide(it->second, true, step_index, phase()));
    live_.erase(it);
  }
}

Category CategoryTracker::decide(const Block& b, bool freed, uint64_t step, Phase phase) const {
  if (b.tag >= 0 && b.tag < static_cast<int8_t>(Category::kCount)) return static_cast<Category>(b.tag);
  if (!known_) return Category::kUnknown;
  if (!freed) return Category::kOther;
  // Kept by autograd from the forward pass until the backward pass used it.
  if (b.phase == Phase::kForward && phase == Phase::kBackward) return Category::kActivation;
  if (b.phase == phase && b.step == step) return Category::kTemporary;
  // Made before a backward pass that used it, and let go after it, within the next step: a batch.
  if (b.phase == Phase::kForward && backwards_ > b.backwards && step <= b.step + 1) return Category::kInput;
  return Category::kOther;
}

void CategoryTracker::settle(const Block& b, Category c) {
  if (keep_all_ && b.id < all_.size()) all_[b.id] = c;
  if (wanted_.count(b.id)) settled_[b.id] = c;
}

void CategoryTracker::save_peak(int32_t device) {
  DevicePeak& p = peaks_[device];
  for (uint64_t id : p.blocks) {
    wanted_.erase(id);
    settled_.erase(id);
  }
  p.blocks.clear();
  p.sizes.clear();
  for (const auto& [addr, b] : live_)
    if (b.device == device) {
      p.blocks.push_back(b.id);
      p.sizes.push_back(b.size);
      wanted_.insert(b.id);
    }
  p.unsaved = false;
}

void CategoryTracker::finish() {
  for (auto& [device, p] : peaks_)
    if (p.unsaved) save_peak(device);
  for (const auto& [addr, b] : live_) settle(b, decide(b, false, 0, phase()));
}

std::vector<CategoryTotal> CategoryTracker::at_peak(int32_t device) const {
  std::vector<CategoryTotal> totals(static_cast<size_t>(Category::kCount));
  for (size_t i = 0; i < totals.size(); ++i) totals[i].category = static_cast<Category>(i);
  auto it = peaks_.find(device);
  if (it == peaks_.end()) return {};
  for (size_t i = 0; i < it->second.blocks.size(); ++i) {
    auto c = settled_.find(it->second.blocks[i]);
    CategoryTotal& t = totals[static_cast<size_t>(c == settled_.end() ? Category::kUnknown : c->second)];
    t.bytes += it->second.sizes[i];
    ++t.count;
  }
  totals.erase(std::remove_if(totals.begin(), totals.end(), [](const CategoryTotal& t) { return t.count == 0; }),
               totals.end());
  std::stable_sort(totals.begin(), totals.end(),
                   [](const CategoryTotal& a, const CategoryTotal& b) { return a.bytes > b.bytes; });
  return totals;
}

Category CategoryTracker::category_of_allocation(uint64_t n) const {
  return n < all_.size() ? all_[n] : Category::kUnknown;
}

}  // namespace memtrace
