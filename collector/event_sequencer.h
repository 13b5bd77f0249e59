// Puts a process's events back in causal order. Threads publish in any order, but every event
// carries the sequence number it took when it happened, so the sequencer releases events
// strictly by sequence number, holding back those that arrive ahead of a missing one.
#pragma once

#include <cstdint>
#include <map>
#include <set>

#include "memtrace/ring/consumer.h"

namespace memtrace {

class EventSequencer {
 public:
  template <typename Emit>
  void push(const RingEvent& event, Emit&& emit) {
    if (event.seq < next_) {  // an event we gave up waiting for: late, but not lost
      emit(event);
      return;
    }
    if (event.seq == next_ && waiting_.empty()) {
      ++next_;
      emit(event);
      return;
    }
    waiting_.emplace(event.seq, event);
    if (waiting_.size() > kMaxHeld) next_ = waiting_.begin()->first;  // a gap that never fills
    release(emit);
  }

  // Events held behind a gap at most: a process that takes sequence numbers and never publishes
  // them (or a hostile one) cannot make the collector hold more.
  static constexpr size_t kMaxHeld = 1 << 20;

  // The producer could not deliver SEQ: do not wait for it.
  template <typename Emit>
  void skip(uint64_t seq, Emit&& emit) {
    if (seq < next_) return;
    skipped_.insert(seq);
    release(emit);
  }

  // Releases everything held, in order, not waiting for what is missing (the process is gone).
  template <typename Emit>
  void flush(Emit&& emit) {
    for (auto& [seq, event] : waiting_) emit(event);
    if (!waiting_.empty()) next_ = waiting_.rbegin()->first + 1;
    waiting_.clear();
    skipped_.clear();
  }

  size_t held() const { return waiting_.size(); }

 private:
  template <typename Emit>
  void release(Emit& emit) {
    for (;;) {
      if (auto s = skipped_.find(next_); s != skipped_.end()) {
        skipped_.erase(s);
        ++next_;
        continue;
      }
      auto it = waiting_.find(next_);
      if (it == waiting_.end()) return;
      emit(it->second);
      waiting_.erase(it);
      ++next_;
    }
  }

  uint64_t next_ = 0;
  std::map<uint64_t, RingEvent> waiting_;
  std::set<uint64_t> skipped_;
};

}  // namespace memtrace
