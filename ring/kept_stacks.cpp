#include "memtrace/ring/kept_stacks.h"

#include <algorithm>
#include <cstring>
#include <iterator>

namespace memtrace {

namespace {

// FRESH (FRESH_WORDS words) followed by the last REUSED_WORDS of KEPT: into KEPT when KEEP, else
// into SCRATCH.
__attribute__((noinline)) const uint64_t* join_into(const uint64_t* fresh, size_t fresh_words,
                                                    std::vector<uint64_t>& kept, size_t reused_words, bool keep,
                                                    std::vector<uint64_t>& scratch) {
  scratch.resize(fresh_words + reused_words);
  if (fresh_words) std::memcpy(scratch.data(), fresh, fresh_words * sizeof(uint64_t));
  if (reused_words)
    std::memcpy(scratch.data() + fresh_words, kept.data() + kept.size() - reused_words,
                reused_words * sizeof(uint64_t));
  if (!keep) return scratch.data();
  kept.swap(scratch);
  return kept.data();
}

// The same, where it is KEPT itself (a loop repeating its stack) without a call or a copy.
inline const uint64_t* join(const uint64_t* fresh, size_t fresh_words, std::vector<uint64_t>& kept, size_t reused_words,
                            bool keep, std::vector<uint64_t>& scratch) {
  if (fresh_words == 0 && reused_words == kept.size()) return kept.data();
  return join_into(fresh, fresh_words, kept, reused_words, keep, scratch);
}

}  // namespace

KeptStacks::Stack KeptStacks::resolve(const RingEvent& e, const uint64_t* native, size_t native_count,
                                      const uint64_t* python, size_t python_count) {
  Stack s;
  s.native = native;
  s.native_count = native_count;
  s.python = python;
  s.python_count = python_count;
  if (!e.stack_kept && e.native_reused == 0 && e.python_reused == 0) return s;  // a free, or a stack of its own

  // A thread that has kept nothing for a ring's length may have ended: its tid may come back.
  const uint64_t index = e.ring_index;
  if (index >= next_sweep_) {
    for (auto it = threads_.begin(); it != threads_.end();)
      it = index - it->second.index > window_ ? threads_.erase(it) : std::next(it);
    next_sweep_ = index + window_;
    last_ = nullptr;
  }
  // The thread of the last event first: a thread allocates many times in a row.
  if (!last_ || last_tid_ != e.event.tid) {
    auto it = e.stack_kept ? threads_.try_emplace(e.event.tid).first : threads_.find(e.event.tid);
    if (it == threads_.end()) {
      s.whole = false;
      return s;
    }
    last_tid_ = e.event.tid;
    last_ = &it->second;  // an element stays put until it is erased
  }
  Kept& k = *last_;
  size_t native_reused = e.native_reused, python_reused = e.python_reused;
  if (native_reused > k.native.size() || 2 * python_reused > k.python.size() || !k.any) {
    s.whole = native_reused == 0 && python_reused == 0;
    native_reused = std::min(native_reused, k.native.size());
    python_reused = std::min(python_reused, k.python.size() / 2);
  }
  s.repeats = e.stack_kept && k.any && native_count == 0 && python_count == 0 && native_reused == k.native.size() &&
              2 * python_reused == k.python.size() && k.python_state == e.python_state &&
              k.truncated == e.stack_truncated;
  s.native = join(native, native_count, k.native, native_reused, e.stack_kept, native_scratch_);
  s.native_count = native_count + native_reused;
  s.python = join(python, 2 * python_count, k.python, 2 * python_reused, e.stack_kept, python_scratch_);
  s.python_count = python_count + python_reused;
  if (e.stack_kept) {
    k.index = index;
    k.python_state = e.python_state;
    k.truncated = e.stack_truncated;
    k.any = true;
  }
  return s;
}

}  // namespace memtrace
