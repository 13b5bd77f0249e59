#include "kept_stack.h"

#include <emmintrin.h>

#include <cstddef>

#include "thread_block.h"

namespace memtrace::inject {

KeptStack* kept_stack() { return static_cast<KeptStack*>(thread_block(ThreadBlock::kKeptStack, sizeof(KeptStack))); }

namespace {

// How many of the last MOST words before A's and B's ends are equal in both, counted from the
// ends in steps of STEP words (a frame's), at most MOST. Four words at a time (SSE2: every x86-64
// has it): ~3 instructions a frame where one at a time took ~7.
inline __attribute__((always_inline)) int equal_tail(const uint64_t* a, const uint64_t* b, int most, int step) {
  auto same = [](const uint64_t* x, const uint64_t* y) {  // the two words at x and y
    return _mm_cmpeq_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x)),
                           _mm_loadu_si128(reinterpret_cast<const __m128i*>(y)));
  };
  int n = 0;
  while (n + 4 <= most &&
         _mm_movemask_epi8(_mm_and_si128(same(a - n - 2, b - n - 2), same(a - n - 4, b - n - 4))) == 0xFFFF)
    n += 4;
  while (n < most && a[-1 - n] == b[-1 - n]) ++n;
  return n / step;
}

// N words from FROM to TO. Mostly a few (the frames a stack does not share), where a call of
// memcpy cost more than the copy; the compiler turns a plain loop into that call.
inline __attribute__((always_inline)) void copy_words(uint64_t* to, const uint64_t* from, size_t n) {
  size_t i = 0;
  for (; i + 2 <= n; i += 2)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(to + i), _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + i)));
  if (i < n) to[i] = from[i];
}

}  // namespace

SharedFrames shared_frames(const KeptStack& kept, const StackCapture& stack) {
  // From the outermost frames in: the arrays' ends.
  SharedFrames shared;
  const int natives = stack.native_count < kept.native_count ? stack.native_count : kept.native_count;
  // The frames the walk took from the walk that gave the kept stack are the kept stack's: not
  // compared again (~180 instructions 30 deep).
  int known = 0;
  if (stack.walk_serial && kept.walk_serial == stack.walk_serial - 1)
    known = stack.walk_shared < natives ? stack.walk_shared : natives;
  shared.native = known + equal_tail(stack.native + stack.native_count - known, kept.native + kMaxNativeFrames - known,
                                     natives - known, 1);
  const int pythons = stack.python_count < kept.python_count ? stack.python_count : kept.python_count;
  if (pythons)
    shared.python =
        equal_tail(stack.python + 2 * stack.python_count, kept.python + 2 * kMaxPythonFrames, 2 * pythons, 2);
  return shared;
}

size_t stack_payload(const StackCapture& stack, SharedFrames reused, ring::EventRecord& rec, uint64_t* words) {
  rec.native_frames = static_cast<uint16_t>(stack.native_count - reused.native);
  rec.python_frames = static_cast<uint16_t>(stack.python_count - reused.python);
  rec.native_reused = static_cast<uint16_t>(reused.native);
  rec.python_reused = static_cast<uint16_t>(reused.python);
  copy_words(words, stack.native, rec.native_frames);
  copy_words(words + rec.native_frames, stack.python, 2 * size_t(rec.python_frames));
  return rec.native_frames + 2 * size_t(rec.python_frames);
}

void keep_stack(KeptStack& kept, const StackCapture& stack, SharedFrames shared, uint64_t session, uint64_t index) {
  copy_words(kept.native + kMaxNativeFrames - stack.native_count, stack.native,
             static_cast<size_t>(stack.native_count - shared.native));
  copy_words(kept.python + 2 * (kMaxPythonFrames - stack.python_count), stack.python,
             2 * static_cast<size_t>(stack.python_count - shared.python));
  kept.walk_serial = stack.walk_serial;
  kept.native_count = stack.native_count;
  kept.python_count = stack.python_count;
  kept.session = session;
  kept.index = index;
}

}  // namespace memtrace::inject
