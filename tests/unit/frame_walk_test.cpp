// memtrace's own stack walk (injector/frame_walk.h) against libunwind's unw_backtrace, which it
// stands in for: the same frames from the same places, across the last walk's reuse.
#include "frame_walk.h"

#include <alloca.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <pthread.h>

#include <algorithm>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <vector>

namespace memtrace::inject {
namespace {

using Backtrace = int (*)(void**, int);

Backtrace libunwind() {
  // Loaded privately, as the injector loads it (stack_capture.cpp): its _Unwind_* stay out of the way.
  static void* lib = ::dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
  return lib ? reinterpret_cast<Backtrace>(::dlsym(lib, "unw_backtrace")) : nullptr;
}

struct Walks {
  std::vector<void*> ours, theirs;
  int ours_count = 0;
};

// Both walks from one frame. Ours starts in walk_frames itself and then gives the return address
// into this function; libunwind's starts at its own return address here: the callers from there
// on are the same frames.
__attribute__((noinline)) Walks walk_both(int most) {
  Walks w;
  w.ours.resize(static_cast<size_t>(most) + 1);
  w.theirs.resize(static_cast<size_t>(most));
  w.ours_count = walk_frames(w.ours.data(), most + 1);
  const int theirs = libunwind()(w.theirs.data(), most);
  w.theirs.resize(static_cast<size_t>(theirs));
  if (w.ours_count >= 0) w.ours.resize(static_cast<size_t>(w.ours_count));
  asm volatile("" ::: "memory");  // no tail call: this frame stays
  return w;
}

// The callers both walks found (libunwind's first frame is its return address into walk_both).
void expect_same(const Walks& w, const char* where) {
  ASSERT_GE(w.ours_count, 2) << where;
  ASSERT_EQ(w.ours.size() - 1, w.theirs.size()) << where;
  for (size_t i = 1; i < w.theirs.size(); ++i) ASSERT_EQ(w.ours[i + 1], w.theirs[i]) << where << ", frame " << i;
}

volatile int g_sink = 0;

__attribute__((noinline)) Walks descend(int depth, int most) {
  if (depth == 0) return walk_both(most);
  Walks w = descend(depth - 1, most);
  g_sink = g_sink + 1;  // no tail call
  return w;
}

// A frame whose CFA is rbp's (alloca): its size changes from call to call.
__attribute__((noinline)) Walks with_alloca(int bytes, int depth) {
  auto* room = static_cast<volatile char*>(alloca(static_cast<size_t>(bytes)));
  room[0] = 1;
  Walks w = descend(depth, 200);
  g_sink = g_sink + room[0];
  return w;
}

// Two callers of the same frames: the same depth, another return address below them.
__attribute__((noinline)) Walks from_here(int depth) {
  Walks w = descend(depth, 200);
  g_sink = g_sink + 2;
  return w;
}
__attribute__((noinline)) Walks from_there(int depth) {
  Walks w = descend(depth, 200);
  g_sink = g_sink + 3;
  return w;
}

// A walk with what it shares with the walk before it, from two callers.
struct TailWalk {
  std::vector<void*> frames;
  WalkTail tail;
};
__attribute__((noinline)) TailWalk walk_tail(int most) {
  TailWalk w;
  w.frames.resize(static_cast<size_t>(most));
  const int n = walk_frames(w.frames.data(), most, &w.tail);
  w.frames.resize(static_cast<size_t>(n < 0 ? 0 : n));
  asm volatile("" ::: "memory");
  return w;
}
__attribute__((noinline)) TailWalk tail_here(int most) {
  TailWalk w = walk_tail(most);
  g_sink = g_sink + 4;
  return w;
}
__attribute__((noinline)) TailWalk tail_there(int most) {
  TailWalk w = walk_tail(most);
  g_sink = g_sink + 5;
  return w;
}

// The outermost SHARED frames of A and B are the same.
void expect_same_tail(const TailWalk& a, const TailWalk& b, int shared) {
  ASSERT_LE(static_cast<size_t>(shared), std::min(a.frames.size(), b.frames.size()));
  for (size_t i = 0; i < static_cast<size_t>(shared); ++i)
    EXPECT_EQ(a.frames[a.frames.size() - 1 - i], b.frames[b.frames.size() - 1 - i]) << i;
}

// A walk says how many of its outermost frames are those of the thread's walk before it (what
// lets the injector skip comparing them with the stack it sent last: kept_stack.h): from the
// frame on where the two walks met (the same rip, rsp and rbp) to the end, never the frame whose
// caller changed, none after a walk MAX cut short.
TEST(FrameWalk, SaysWhichOutermostFramesAreTheWalkBeforesToo) {
  TailWalk same[2];
  for (TailWalk& w : same) w = tail_here(200);
  const TailWalk& b = same[1];
  ASSERT_GT(b.frames.size(), 4u);
  EXPECT_EQ(b.tail.serial, same[0].tail.serial + 1);
  EXPECT_EQ(b.frames, same[0].frames);
  EXPECT_GT(b.tail.shared, static_cast<int>(b.frames.size()) / 2);
  expect_same_tail(b, same[0], b.tail.shared);
  const TailWalk c = tail_there(200);
  EXPECT_EQ(c.tail.serial, b.tail.serial + 1);
  ASSERT_EQ(c.frames.size(), b.frames.size());
  EXPECT_NE(c.frames[2], b.frames[2]);  // the return address into tail_there, not tail_here
  EXPECT_GT(c.tail.shared, 0);
  EXPECT_LE(c.tail.shared, static_cast<int>(c.frames.size()) - 3);
  expect_same_tail(c, b, c.tail.shared);
  const TailWalk cut = tail_here(3);
  EXPECT_EQ(cut.frames.size(), 3u);
  EXPECT_EQ(tail_here(200).tail.shared, 0) << "the walk before it ended at 3 frames, not the outermost";
}

TEST(FrameWalk, GivesTheFramesLibunwindGivesAtEveryDepth) {
  ASSERT_NE(libunwind(), nullptr) << "libunwind.so.8 (libunwind8) is needed";
  for (int round = 0; round < 3; ++round)  // the second and third rounds reuse the walks before
    for (int depth = 0; depth < 40; ++depth) expect_same(descend(depth, 200), "descend");
}

TEST(FrameWalk, ReusesNoFrameWhoseCallerChanged) {
  for (int i = 0; i < 50; ++i) {
    expect_same(from_here(i % 7), "from_here");
    expect_same(from_there(i % 7), "from_there");
    expect_same(from_here(i % 7), "from_here again");
  }
}

TEST(FrameWalk, StepsFramesSizedAtRunTime) {
  for (int i = 0; i < 60; ++i) expect_same(with_alloca(16 + 48 * (i % 5), i % 4), "with_alloca");
}

TEST(FrameWalk, StopsAtMostFramesAndGoesDeeperAfter) {
  for (int most : {3, 8, 200, 5, 200}) {
    Walks w = descend(20, most);
    if (most == 200) {  // the whole stack
      expect_same(w, "whole");
      continue;
    }
    ASSERT_EQ(w.ours_count, most + 1) << most;
    ASSERT_EQ(static_cast<int>(w.theirs.size()), most);
    for (int i = 1; i < most; ++i) ASSERT_EQ(w.ours[static_cast<size_t>(i) + 1], w.theirs[static_cast<size_t>(i)]);
  }
}

// The same frames at the same stack addresses below a frame whose CFA is rbp's, and that frame's
// rbp another: two callers of different sizes, its alloca making up the difference. What the last
// walk read above the old CFA may still lie in the (unwritten) alloca.
volatile char* g_buffer = nullptr;
__attribute__((noinline)) Walks sized(size_t bytes, bool walk) {
  auto* room = static_cast<volatile char*>(alloca(bytes));
  g_buffer = room;
  Walks w;
  if (walk) w = descend(2, 200);
  g_sink = g_sink + 1;
  return w;
}
template <size_t kPad>
__attribute__((noinline)) Walks caller(size_t bytes, bool walk) {
  volatile char pad[kPad];
  pad[0] = 1;
  Walks w = sized(bytes, walk);
  g_sink = g_sink + pad[0];
  return w;
}
constexpr auto small_caller = caller<64>;
constexpr auto large_caller = caller<1024>;

TEST(FrameWalk, ReusesNoFrameBelowAFrameWhoseRbpChanged) {
  large_caller(64, false);
  const auto* target = g_buffer;  // where the small caller's alloca must end too
  size_t bytes = 64;
  for (int tries = 0; tries < 8; ++tries) {
    small_caller(bytes, false);
    if (g_buffer == target) break;
    bytes += static_cast<size_t>(g_buffer - target);
  }
  ASSERT_EQ(g_buffer, target) << "the frames could not be lined up";
  for (int i = 0; i < 5; ++i) {
    expect_same(large_caller(64, true), "large caller");
    expect_same(small_caller(bytes, true), "small caller");
  }
}

// rbp as a register of a function's own (as CPython's evaluation loop uses it): the holder keeps
// VALUE in rbp across its call of FRAMED, whose frame pointer saves it; the holder's CFA is rsp's,
// so VALUE decides no frame's place, and a walk through it from one call to the next is the last
// walk's. Both in assembly: a compiler keeps no value in rbp on request.
extern "C" void memtrace_test_rbp_holder(void (*framed)(void (*)()), uint64_t value, void (*inner)());
extern "C" void memtrace_test_framed(void (*inner)());
asm(R"(
  .text
  .globl memtrace_test_rbp_holder
  .type memtrace_test_rbp_holder, @function
memtrace_test_rbp_holder:
  .cfi_startproc
  push %rbp
  .cfi_def_cfa_offset 16
  .cfi_offset %rbp, -16
  mov %rdi, %rax
  mov %rsi, %rbp
  mov %rdx, %rdi
  call *%rax
  pop %rbp
  .cfi_def_cfa_offset 8
  ret
  .cfi_endproc
  .size memtrace_test_rbp_holder, .-memtrace_test_rbp_holder

  .globl memtrace_test_framed
  .type memtrace_test_framed, @function
memtrace_test_framed:
  .cfi_startproc
  push %rbp
  .cfi_def_cfa_offset 16
  .cfi_offset %rbp, -16
  mov %rsp, %rbp
  .cfi_def_cfa_register %rbp
  call *%rdi
  pop %rbp
  .cfi_def_cfa %rsp, 8
  ret
  .cfi_endproc
  .size memtrace_test_framed, .-memtrace_test_framed
)");

TailWalk g_held_tail;
Walks g_held_walks;
__attribute__((noinline)) void held_tail() { g_held_tail = walk_tail(200); }
__attribute__((noinline)) void held_walks() { g_held_walks = walk_both(200); }

uint64_t g_held_value = 0;
__attribute__((noinline)) void hold_inside() {
  memtrace_test_rbp_holder(memtrace_test_framed, g_held_value, held_walks);
  g_sink = g_sink + 1;  // no tail call
}

// From one call site, so that every walk has the same frames.
__attribute__((noinline)) void hold(uint64_t value, void (*inner)()) {
  memtrace_test_rbp_holder(memtrace_test_framed, value, inner);
  g_sink = g_sink + 1;  // no tail call
}

TEST(FrameWalk, TakesTheFramesPastAFrameWhoseRbpIsAValueOfItsOwn) {
  TailWalk first;
  for (uint64_t value : {0x1111, 0x2222, 0x3333}) {
    hold(value, held_tail);
    const TailWalk& w = g_held_tail;
    if (value == 0x1111) {
      first = w;
      continue;
    }
    ASSERT_EQ(w.frames, first.frames);
    // walk_frames, walk_tail, held_tail, framed, the holder: the walk met the last one inside them
    // and took every frame on from there, the holder's too (stepping it again, and meeting the last
    // walk outside it, would have shared size - 5).
    ASSERT_GT(w.frames.size(), 6u);
    EXPECT_GE(w.tail.shared, static_cast<int>(w.frames.size()) - 4) << value;
    expect_same_tail(w, first, w.tail.shared);
  }
  for (uint64_t value : {0x4444, 0x5555, 0x6666, 0x7777}) {  // and the frames are libunwind's
    hold(value, held_walks);
    expect_same(g_held_walks, "through the holder");
  }
  // Inside a frame whose CFA is rbp's: the walk reads its rbp from the holder's slot, past frames
  // whose rbp was the holder's value.
  for (uint64_t value : {0x8888, 0x9999, 0xAAAA}) {
    g_held_value = value;
    memtrace_test_framed(hold_inside);
    expect_same(g_held_walks, "through the holder, inside a framed function");
  }
}

// A walk told where to stop: the COUNT-th frame whose address is the stop's.
__attribute__((noinline)) TailWalk walk_stopped(const WalkStop* stop) {
  TailWalk w;
  w.frames.resize(200);
  const int n = walk_frames(w.frames.data(), 200, &w.tail, stop);
  w.frames.resize(static_cast<size_t>(n < 0 ? 0 : n));
  asm volatile("" ::: "memory");
  return w;
}
__attribute__((noinline)) TailWalk descend_to(int depth, const WalkStop* stop) {
  if (depth == 0) return walk_stopped(stop);
  TailWalk w = descend_to(depth - 1, stop);
  g_sink = g_sink + 1;  // no tail call
  return w;
}

__attribute__((noinline)) TailWalk walk_deep(const WalkStop* stop) {
  TailWalk w = descend_to(16, stop);
  g_sink = g_sink + 1;  // no tail call
  return w;
}

const WalkStop* volatile g_stop = nullptr;

TEST(FrameWalk, EndsWithTheStopsFrame) {
  // Every walk the same way: the first one whole, to find the stop's address, which is the
  // return address into descend_to after its call of itself: most of the frames (the compiler may
  // inline a few of the calls).
  TailWalk whole;
  void* at = nullptr;
  int m = 0;
  size_t last_size = 0;
  for (int count : {0, 3, 3, 6, 2, 8, 8, 0, 5, 5}) {
    const int stop_count = count == 8 ? m : count == 0 && at ? m + 1 : count;  // 8: the last one; 0: past it
    const WalkStop stop{reinterpret_cast<uint64_t>(at), 1, stop_count};
    g_stop = at ? &stop : nullptr;
    const TailWalk w = walk_deep(g_stop);  // one call site, so that every walk has the same frames
    if (!at) {
      whole = w;
      std::map<void*, int> seen;
      for (void* f : whole.frames) ++seen[f];
      auto most = std::max_element(seen.begin(), seen.end(), [](auto& a, auto& b) { return a.second < b.second; });
      at = most->first;
      m = most->second;
      ASSERT_GE(m, 8);
      last_size = w.frames.size();
      continue;
    }
    size_t expected = whole.frames.size();  // a count past the stack's: the whole stack
    for (size_t i = 0, found = 0; i < whole.frames.size(); ++i)
      if (whole.frames[i] == at && ++found == static_cast<size_t>(stop_count)) {
        expected = i + 1;
        break;
      }
    ASSERT_EQ(w.frames.size(), expected) << stop_count;
    for (size_t i = 0; i < w.frames.size(); ++i)
      EXPECT_EQ(w.frames[i], whole.frames[i]) << stop_count << ", frame " << i;
    // The same stop as the walk before: both end with the same frame, so the frames they share
    // reach the end. A walk that went on past the last one's end shares none of its frames.
    if (w.frames.size() == last_size) {
      EXPECT_GT(w.tail.shared, static_cast<int>(w.frames.size()) / 2) << stop_count;
    } else if (w.frames.size() > last_size) {
      EXPECT_EQ(w.tail.shared, 0) << stop_count;
    }
    last_size = w.frames.size();
  }
}

int g_compared = 0;
int compare_and_walk(const void* a, const void* b) {
  expect_same(walk_both(200), "qsort's comparison");  // libc's frames between
  ++g_compared;
  return *static_cast<const int*>(a) - *static_cast<const int*>(b);
}

TEST(FrameWalk, StepsThroughTheCLibrary) {
  int values[] = {5, 3, 9, 1, 7, 2};
  std::qsort(values, 6, sizeof(int), compare_and_walk);
  EXPECT_GT(g_compared, 0);
  EXPECT_EQ(values[0], 1);
}

TEST(FrameWalk, WalksAnotherThreadsStack) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "with ThreadSanitizer's runtime, libunwind's walks crash in a thread of their own (why the injector "
                  "is not instrumented under scripts/sanitize thread)";
#endif
  pthread_t thread;
  ASSERT_EQ(pthread_create(
                &thread, nullptr,
                [](void*) -> void* {
                  for (int depth = 0; depth < 10; ++depth) expect_same(descend(depth, 200), "thread");
                  return nullptr;
                },
                nullptr),
            0);
  pthread_join(thread, nullptr);
}

// A signal frame is one libunwind steps and memtrace's walk leaves to it.
int g_in_handler = 0;
TEST(FrameWalk, LeavesASignalFrameToLibunwind) {
  struct sigaction action {};
  action.sa_handler = [](int) {
    void* frames[64];
    g_in_handler = walk_frames(frames, 64);
  };
  sigaction(SIGUSR1, &action, nullptr);
  raise(SIGUSR1);
  EXPECT_EQ(g_in_handler, -1);
  signal(SIGUSR1, SIG_DFL);
  expect_same(descend(3, 200), "after the signal");
}

}  // namespace
}  // namespace memtrace::inject
