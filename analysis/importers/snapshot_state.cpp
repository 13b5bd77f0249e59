#include "snapshot_state.h"

#include <algorithm>

namespace memtrace::snapshot {

namespace {
uint64_t end_of(uint64_t addr, uint64_t size) { return addr + std::min(size, UINT64_MAX - addr); }
}  // namespace

template <typename F>
void StartState::untouched(uint64_t begin, uint64_t end, F&& f) const {
  auto it = touched_.upper_bound(begin);
  if (it != touched_.begin() && std::prev(it)->second > begin) --it;
  uint64_t at = begin;
  for (; it != touched_.end() && it->first < end; ++it) {
    if (it->first > at) f(at, it->first);
    at = std::max(at, it->second);
  }
  if (at < end) f(at, end);
}

void StartState::touch(uint64_t begin, uint64_t end) {
  auto it = touched_.upper_bound(begin);
  if (it != touched_.begin() && std::prev(it)->second >= begin) --it;
  while (it != touched_.end() && it->first <= end) {
    begin = std::min(begin, it->first);
    end = std::max(end, it->second);
    it = touched_.erase(it);
  }
  touched_.emplace(begin, end);
}

bool StartState::may_keep(const Entry& e) const {
  if (!e.action) return false;
  switch (*e.action) {
    case TorchAction::kFreeCompleted: return !allocated_.count(e.addr) && !before_.count(e.addr);
    case TorchAction::kSegmentFree:
    case TorchAction::kSegmentUnmap: return true;
    default: return false;
  }
}

void StartState::see(const Entry& e) {
  if (!e.action) return;
  switch (*e.action) {
    case TorchAction::kAlloc: allocated_.insert(e.addr); break;
    case TorchAction::kFreeRequested:
      if (!allocated_.count(e.addr) && !before_.count(e.addr)) requested_.insert(e.addr);
      break;
    case TorchAction::kFreeCompleted:
      if (allocated_.erase(e.addr) == 0 && !before_.count(e.addr))  // freed, not allocated here: it was there
        before_[e.addr] = Block{e.size, e.stack, !requested_.count(e.addr), e.category};
      break;
    case TorchAction::kSegmentAlloc:
    case TorchAction::kSegmentMap:
    case TorchAction::kSegmentFree:
    case TorchAction::kSegmentUnmap: {
      uint64_t end = end_of(e.addr, e.size);
      bool freed = *e.action == TorchAction::kSegmentFree || *e.action == TorchAction::kSegmentUnmap;
      if (freed)
        untouched(e.addr, end, [&](uint64_t b, uint64_t en) {
          freed_first_[b] = Range{en - b, *e.action == TorchAction::kSegmentUnmap, e.stack, e.stream};
        });
      touch(e.addr, end);
      break;
    }
    default: break;
  }
}

std::map<uint64_t, Block> StartState::blocks(const std::map<uint64_t, Block>& at_end) const {
  std::map<uint64_t, Block> start = before_;
  for (const auto& [addr, b] : at_end) {
    if (allocated_.count(addr) || before_.count(addr)) continue;  // the trace allocated it, or freed it first
    Block kept = b;
    if (requested_.count(addr)) kept.pending = false;  // its free was requested in the trace
    start[addr] = kept;
  }
  return start;
}

Ranges StartState::reserved(const Ranges& at_end) const {
  Ranges start;
  for (const auto& kept : at_end)
    untouched(kept.first, end_of(kept.first, kept.second.size), [&](uint64_t b, uint64_t e) {
      Range part = kept.second;
      part.size = e - b;
      start[b] = part;
    });
  for (const auto& [base, r] : freed_first_) start[base] = r;
  return start;
}

}  // namespace memtrace::snapshot
