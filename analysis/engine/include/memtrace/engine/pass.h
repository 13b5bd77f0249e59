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

// The events a pass looks at, so that the driver calls it for those only (a call is paid on
// every event): calls (allocations and frees outside the allocated layer), marks (marks, ranges,
// counters and samples: they change no memory) and the allocated layer's events, marks included.
enum EventClasses : unsigned {
  kCallEvents = 1,
  kMarkEvents = 2,
  kAllocatedLayerEvents = 4,
  kEveryEvent = kCallEvents | kMarkEvents | kAllocatedLayerEvents,
};

class Pass {
 public:
  virtual ~Pass() = default;
  // Which events on_event() is called for (asked once, when the pass is added to a driver).
  virtual unsigned looks_at() const { return kEveryEvent; }
  // After the replay applied EVENT: what it did to memory.
  virtual void on_event(const Event& event, const ReplayStep& step, const Replay& replay) = 0;
  // After the last event. END_NS: when the trace ends (its footer's time, or its last event's).
  virtual void finish(uint64_t /*end_ns*/) {}
};

// A pass that also looks before the replay applies each event. Apart from Pass so that the driver
// calls before() only on the few passes that have one: every call is paid on every event.
class PassWithBefore : public Pass {
 public:
  // The live set as it was (what a free is about to release).
  virtual void before(const Event& event, const Replay& replay) = 0;
};

// A pass made of one function FN(event, step, replay): how an analysis feeds the trackers it is
// composed of.
template <typename Fn>
class FunctionPass : public Pass {
 public:
  explicit FunctionPass(Fn fn, unsigned looks_at = kEveryEvent) : fn_(std::move(fn)), looks_at_(looks_at) {}
  unsigned looks_at() const override { return looks_at_; }
  void on_event(const Event& event, const ReplayStep& step, const Replay& replay) override { fn_(event, step, replay); }

 private:
  Fn fn_;
  unsigned looks_at_;
};

class PassDriver {
 public:
  // Passes see each event in the order they were added.
  PassDriver& add(Pass& pass) {
    passes_.push_back(&pass);
    for (unsigned c = 0; c < kClasses; ++c)
      if (pass.looks_at() & (1u << c)) by_class_[c].push_back(&pass);
    if (auto* looks_before = dynamic_cast<PassWithBefore*>(&pass)) looking_before_.push_back(looks_before);
    return *this;
  }

  // Replays EVENT and hands it to every pass.
  const ReplayStep& feed(const Event& event) {
    for (PassWithBefore* p : looking_before_) p->before(event, replay_);
    const ReplayStep& step = replay_.apply(event);
    for (Pass* p : by_class_[class_of(event)]) p->on_event(event, step, replay_);
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
  static constexpr unsigned kClasses = 3;
  // The bit of EventClasses that EVENT is, as a number.
  static unsigned class_of(const Event& event) {
    return event.layer == Layer::kAllocated ? 2 : event.op() == Op::kMark ? 1 : 0;
  }
  static_assert(kCallEvents == 1u << 0 && kMarkEvents == 1u << 1 && kAllocatedLayerEvents == 1u << 2);

  std::vector<Pass*> passes_;
  std::vector<Pass*> by_class_[kClasses];  // the passes that look at each class, in order
  std::vector<PassWithBefore*> looking_before_;
  uint64_t last_t_ns_ = 0;
};

}  // namespace memtrace
