#include "memtrace/ring/kept_stacks.h"

#include <algorithm>
#include <cstring>
#include <iterator>

namespace memtrace {

namespace {

// FRESH (FRESH_WORDS words) followed by the last REUSED_WORDS of KEPT: into KEPT when KEEP, else
// into SCRATCH. Where it is KEPT itself, nothing is copied.
const uint64_t* join(const uint64_t* fresh, size_t fresh_words, std::vector<uint64_t>& kept, size_t reused_words,
                     bool keep, std::vector<uint64_t>& scratch) {
  if (fresh_words == 0 && reused_words == kept.size()) return kept.data();
  scratch.resize(fresh_words + reused_words);
  if (fresh_words) std::memcpy(scratch.data(), fresh, fresh_words * sizeof(uint64_t));
  if (reused_words)
    std::memcpy(scratch.data() + fresh_words, kept.data() + kept.size() - reused_words,
                reused_words * sizeof(uint64_t));
  if (!keep) return scratch.data();
  kept.swap(scratch);
  return kept.data();
}

}  // namespace

KeptStacks::Stack KeptStacks::resolve(const ring::EventRecord& rec, const uint64_t* words, uint64_t index) {
  Stack s;
  s.native = words;
  s.native_count = rec.native_frames;
  s.python = words + rec.native_frames;
  s.python_count = rec.python_frames;
  const bool keep = rec.stack_flags & ring::kStackKept;
  if (!keep && rec.native_reused == 0 && rec.python_reused == 0) return s;  // a free, or a stack of its own

  // A thread that has kept nothing for a ring's length may have ended: its tid may come back.
  if (index >= next_sweep_) {
    for (auto it = threads_.begin(); it != threads_.end();)
      it = index - it->second.index > window_ ? threads_.erase(it) : std::next(it);
    next_sweep_ = index + window_;
  }
  auto it = keep ? threads_.try_emplace(rec.event.tid).first : threads_.find(rec.event.tid);
  if (it == threads_.end()) {
    s.whole = false;
    return s;
  }
  Kept& k = it->second;
  size_t native_reused = rec.native_reused, python_reused = rec.python_reused;
  if (native_reused > k.native.size() || 2 * python_reused > k.python.size() || !k.any) {
    s.whole = native_reused == 0 && python_reused == 0;
    native_reused = std::min(native_reused, k.native.size());
    python_reused = std::min(python_reused, k.python.size() / 2);
  }
  const bool truncated = rec.stack_flags & ring::kStackTruncated;
  s.repeats = keep && k.any && rec.native_frames == 0 && rec.python_frames == 0 && native_reused == k.native.size() &&
              2 * python_reused == k.python.size() && k.python_state == rec.python_state && k.truncated == truncated;
  s.native = join(words, rec.native_frames, k.native, native_reused, keep, native_scratch_);
  s.native_count = rec.native_frames + native_reused;
  s.python = join(words + rec.native_frames, 2 * size_t(rec.python_frames), k.python, 2 * python_reused, keep,
                  python_scratch_);
  s.python_count = rec.python_frames + python_reused;
  if (keep) {
    k.index = index;
    k.python_state = rec.python_state;
    k.truncated = truncated;
    k.any = true;
  }
  return s;
}

}  // namespace memtrace
