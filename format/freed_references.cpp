#include "memtrace/format/freed_references.h"

#include "memtrace/format/varint.h"

namespace memtrace {

namespace {
// Where an allocation lives: a free ends only the allocation of its own address space.
uint64_t key(const Event& e) {
  return e.addr ^ (static_cast<uint64_t>(e.layer) << 56) ^ (static_cast<uint64_t>(e.kind) << 48);
}
}  // namespace

uint64_t FreedReferenceWriter::value(const Event& e) {
  if (!e.ok()) return 0;  // a failed call holds nothing, and frees nothing
  const Op op = e.op();
  if (op == Op::kAlloc) {
    const Marked marked{marked_++, e.addr};
    if (auto [at, fresh] = live_.try_emplace(key(e), marked); !fresh) *at = marked;
    return 1;
  }
  if (op != Op::kFree) return 0;
  const Marked* marked = live_.find(key(e));
  if (!marked || marked->addr != e.addr) return 0;
  const uint64_t ordinal = marked->ordinal;
  live_.erase(key(e));
  // The allocation counted back from the newest (a free of a young allocation: a small number),
  // or from the one the last reference freed (a pass freeing in the reverse or the same order it
  // allocated in: the same number every time), whichever is smaller; the low bit says which.
  const uint64_t back = marked_ - 1 - ordinal;
  const int64_t step = static_cast<int64_t>(ordinal - last_freed_);
  const uint64_t from_last = zigzag(step);
  last_freed_ = ordinal;
  return from_last < back ? 2 + (from_last << 1 | 1) : 2 + (back << 1);
}

std::string FreedReferenceReader::resolve(std::vector<Event>& events, const std::vector<uint64_t>& freed) {
  for (size_t i = 0; i < events.size(); ++i) {
    const uint64_t value = freed[i];
    if (value == 0) continue;
    Event& e = events[i];
    if (value == 1) {
      if (window_.empty()) window_.resize(kWindow);
      Marked& slot = window_[marked_ % kWindow];
      if (slot.live) older_.try_emplace(marked_ - kWindow, slot);  // leaves the window still live
      slot = Marked{e.addr, true};
      ++marked_;
      continue;
    }
    const uint64_t n = (value - 2) >> 1;
    // Past either end, the ordinal wraps to one no allocation has.
    const uint64_t ordinal = (value - 2) & 1 ? last_freed_ + static_cast<uint64_t>(unzigzag(n)) : marked_ - 1 - n;
    Marked* m = nullptr;
    bool in_window = false;
    if (ordinal < marked_ && marked_ - ordinal <= kWindow) {
      m = &window_[ordinal % kWindow];
      in_window = true;
    } else if (ordinal < marked_) {
      m = older_.find(ordinal);
    }
    if (!m || !m->live)
      return "event " + std::to_string(i) + " of a batch frees by reference allocation " + std::to_string(ordinal) +
             ", which is not live";
    e.addr = m->addr;
    last_freed_ = ordinal;
    if (in_window)
      m->live = false;
    else
      older_.erase(ordinal);
  }
  return {};
}

}  // namespace memtrace
