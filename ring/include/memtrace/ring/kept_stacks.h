// The collector's end of ring::kStackKept: each thread's kept stack, and the stacks of the
// records that end with its outermost frames instead of sending them (ring::EventRecord::
// native_reused), made whole again. Done where the events are recorded, after the reader's
// batches (RecordBatch), which then carry only the frames the records carried.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "memtrace/ring/consumer.h"

namespace memtrace {

class KeptStacks {
 public:
  // A record's whole stack; valid until the next resolve().
  struct Stack {
    const uint64_t* native = nullptr;
    size_t native_count = 0;
    const uint64_t* python = nullptr;  // (code, instruction) pairs
    size_t python_count = 0;
    // The same frames, Python state and truncation as the thread's kept stack before it, which
    // was kept too: a loop allocating from one place.
    bool repeats = false;
    // False when the record named more kept frames than its thread has (nothing the injector
    // sends): its stack is the frames it carried.
    bool whole = true;
  };

  // WINDOW: the ring's length in slots. A kept stack is forgotten once the records read are
  // further past its own than that: the injector reuses none beyond it.
  explicit KeptStacks(uint64_t window) : window_(window) {}

  // The stack of event E, whose record carried NATIVE_COUNT native frames at NATIVE and
  // PYTHON_COUNT Python pairs at PYTHON. Events are resolved in ring order.
  Stack resolve(const RingEvent& e, const uint64_t* native, size_t native_count, const uint64_t* python,
                size_t python_count);

  size_t threads() const { return threads_.size(); }

 private:
  struct Kept {
    uint64_t index = 0;
    std::vector<uint64_t> native, python;
    uint8_t python_state = 0;
    bool truncated = false;
    bool any = false;  // a stack was kept
  };

  uint64_t window_;
  uint64_t next_sweep_ = 0;
  std::unordered_map<uint32_t, Kept> threads_;  // by tid
  uint32_t last_tid_ = 0;
  Kept* last_ = nullptr;  // last_tid_'s
  std::vector<uint64_t> native_scratch_, python_scratch_;
};

}  // namespace memtrace
