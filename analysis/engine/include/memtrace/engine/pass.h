// The one way a trace is read: a driver replays its events once, in order, and hands each one,
// with what the replay made of it, to the passes registered with it. The analyses of a report,
// the exports, a snapshot's view, verify and the collector (as events arrive) are all passes.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "memtrace/engine/replay.h"
#include "memtrace/format/trace_reader.h"

namespace memtrace {

class Pass {
 public:
  virtual ~Pass() = default;
  // Before the replay applies EVENT: the live set as it was (what a free is about to release).
  virtual void before(const Event& /*event*/, const Replay& /*replay*/) {}
  // After: what EVENT did to memory.
  virtual void on_event(const Event& event, const ReplayStep& step, const Replay& replay) = 0;
  // After the last event. END_NS: when the trace ends (its footer's time, or its last event's).
  virtual void finish(uint64_t /*end_ns*/) {}
};

// A pass made of one function FN(event, step, replay): how an analysis feeds the trackers it is
// composed of.
template <typename Fn>
class FunctionPass : public Pass {
 public:
  explicit FunctionPass(Fn fn) : fn_(std::move(fn)) {}
  void on_event(const Event& event, const ReplayStep& step, const Replay& replay) override { fn_(event, step, replay); }

 private:
  Fn fn_;
};

class PassDriver {
 public:
  // Passes see each event in the order they were added.
  PassDriver& add(Pass& pass) {
    passes_.push_back(&pass);
    return *this;
  }

  // Replays EVENT and hands it to every pass.
  const ReplayStep& feed(const Event& event) {
    for (Pass* p : passes_) p->before(event, replay_);
    const ReplayStep& step = replay_.apply(event);
    for (Pass* p : passes_) p->on_event(event, step, replay_);
    last_t_ns_ = event.t_ns;
    return step;
  }

  // Feeds every event READER holds, then finishes the passes at the trace's end; returns it.
  uint64_t run(TraceReader& reader);
  void finish(uint64_t end_ns) {
    for (Pass* p : passes_) p->finish(end_ns);
  }

  const Replay& replay() const { return replay_; }
  uint64_t last_t_ns() const { return last_t_ns_; }

 private:
  Replay replay_;
  std::vector<Pass*> passes_;
  uint64_t last_t_ns_ = 0;
};

}  // namespace memtrace
