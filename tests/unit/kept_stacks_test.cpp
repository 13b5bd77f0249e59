// A thread's stack sent by reference to its last one (ring::kStackKept): the injector's side
// (injector/kept_stack.h: which outermost frames a stack shares with the kept one, the record it
// sends) and the collector's (KeptStacks: the record's stack made whole) give back every stack
// exactly, for threads whose records interleave, records that land beyond the ring's reach of
// their kept stack, and records that keep nothing; and a record that names frames the collector
// does not have (the traced process's memory says so, not memtrace) yields what it carried.
#include "memtrace/ring/kept_stacks.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <vector>

#include "kept_stack.h"

namespace {

using namespace memtrace;
using inject::KeptStack;
using inject::StackCapture;

constexpr uint64_t kWindow = 512;  // the ring's length, in slots

// A stack as a loop of one of a few threads makes it: a base the thread keeps, a middle of a few
// choices, and a random innermost part, some of each part left out at times.
StackCapture random_stack(std::mt19937& random, uint32_t tid) {
  StackCapture s;
  const int base = 3 + static_cast<int>(tid % 4), middle = static_cast<int>(random() % 12),
            inner = static_cast<int>(random() % 4);
  int n = 0;
  for (int i = 0; i < inner; ++i) s.native[n++] = 0x5000 + random() % 3;
  for (int i = 0; i < middle; ++i) s.native[n++] = 0x4000 + (i + random() % 2) % 5;
  for (int i = 0; i < base; ++i) s.native[n++] = 0x1000 * tid + static_cast<uint64_t>(i);
  const int pythons = static_cast<int>(random() % 5);
  s.native_count = static_cast<uint16_t>(random() % 8 == 0 && pythons > 0 ? 0 : n);  // never no frames at all
  for (int i = 0; i < pythons; ++i) {
    s.python[2 * i] = 0x900 + static_cast<uint64_t>(i) + (i == 0 ? random() % 2 : 0);
    s.python[2 * i + 1] = random() % 2;
  }
  s.python_count = static_cast<uint16_t>(pythons);
  s.python_state = static_cast<uint8_t>(pythons        ? ring::kPythonFrames
                                        : random() % 2 ? ring::kPythonNoFrames
                                                       : ring::kNoPython);
  s.truncated = random() % 16 == 0;
  return s;
}

// What the collector makes of REC, the record at ring slot INDEX whose payload is at WORDS.
KeptStacks::Stack resolve(KeptStacks& collector, const ring::EventRecord& rec, const uint64_t* words, uint64_t index) {
  return collector.resolve(ring_event_of(rec, index), words, rec.native_frames, words + rec.native_frames,
                           rec.python_frames);
}

std::vector<uint64_t> natives(const StackCapture& s) { return {s.native, s.native + s.native_count}; }
std::vector<uint64_t> pythons(const StackCapture& s) { return {s.python, s.python + 2 * s.python_count}; }

TEST(KeptStacks, EveryStackComesBackWholeWhateverItShares) {
  std::mt19937 random(7);
  KeptStacks collector(kWindow);
  constexpr uint32_t kThreads = 4;
  // The injector's side: each thread's kept stack (as its thread block would hold it), zeroed.
  std::vector<std::unique_ptr<KeptStack>> kept;
  for (uint32_t t = 0; t < kThreads; ++t) kept.push_back(std::make_unique<KeptStack>());
  std::vector<std::unique_ptr<StackCapture>> last(kThreads);  // each thread's last kept stack, whole
  uint64_t index = 1000, reused_frames = 0, sent_frames = 0, repeats = 0, far = 0;
  for (int step = 0; step < 100000; ++step) {
    const uint32_t t = random() % kThreads, tid = 100 + t;
    // Mostly a few slots on; at times more than the ring's length, past the kept stacks.
    index += random() % 64 == 0 ? kWindow + random() % 3 : 1 + random() % 6;
    ring::EventRecord rec{};
    rec.event.tid = tid;
    uint64_t words[inject::kMaxNativeFrames + 2 * inject::kMaxPythonFrames];
    const int kind = static_cast<int>(random() % 8);
    if (kind == 0) {  // a free: no stack
      const KeptStacks::Stack got = resolve(collector, rec, words, index);
      EXPECT_EQ(got.native_count + got.python_count, 0u);
      continue;
    }
    StackCapture stack = random_stack(random, t);
    if (last[t] && random() % 2) stack = *last[t];  // a loop repeating its stack
    rec.python_state = stack.python_state;
    rec.stack_flags = stack.truncated ? ring::kStackTruncated : 0;
    // What publish() does: a stack a signal handler sends inside another publish keeps nothing.
    const bool keep = kind != 1;
    KeptStack& k = *kept[t];
    const inject::SharedFrames shared =
        keep && k.session == 1 ? inject::shared_frames(k, stack) : inject::SharedFrames{};
    const bool near = keep && k.session == 1 && index - k.index <= kWindow;
    far += keep && k.session == 1 && !near;
    const inject::SharedFrames reused = near ? shared : inject::SharedFrames{};
    if (keep) rec.stack_flags |= ring::kStackKept;
    const size_t sent = inject::stack_payload(stack, reused, rec, words);
    reused_frames += reused.native + reused.python;
    sent_frames += sent;

    const KeptStacks::Stack got = resolve(collector, rec, words, index);
    ASSERT_TRUE(got.whole);
    ASSERT_EQ(std::vector<uint64_t>(got.native, got.native + got.native_count), natives(stack)) << "step " << step;
    ASSERT_EQ(std::vector<uint64_t>(got.python, got.python + 2 * got.python_count), pythons(stack)) << "step " << step;
    const bool same = keep && last[t] && natives(*last[t]) == natives(stack) && pythons(*last[t]) == pythons(stack) &&
                      last[t]->python_state == stack.python_state && last[t]->truncated == stack.truncated && near;
    EXPECT_EQ(got.repeats, same) << "step " << step;
    repeats += got.repeats;
    if (keep) {
      inject::keep_stack(k, stack, reused, 1, index);
      last[t] = std::make_unique<StackCapture>(stack);
    }
  }
  // Every path taken, and many frames not sent again (the threads' bases, the middles in common).
  EXPECT_GT(repeats, 10000u);
  EXPECT_GT(far, 100u);
  EXPECT_GT(reused_frames, sent_frames / 3);
  EXPECT_LE(collector.threads(), kThreads);
}

TEST(KeptStacks, AThreadThatKeptNothingForARingsLengthIsForgotten) {
  KeptStacks collector(kWindow);
  uint64_t words[4] = {1, 2, 3, 4};
  ring::EventRecord rec{};
  rec.stack_flags = ring::kStackKept;
  rec.native_frames = 4;
  for (uint32_t tid = 1; tid <= 3; ++tid) {
    rec.event.tid = tid;
    resolve(collector, rec, words, tid);
  }
  EXPECT_EQ(collector.threads(), 3u);
  // Thread 3 repeats its stack a ring's length on; 1 and 2, further behind, go.
  rec.event.tid = 3;
  rec.native_frames = 0;
  rec.native_reused = 4;
  KeptStacks::Stack got = resolve(collector, rec, words, 3 + kWindow);
  EXPECT_TRUE(got.whole);
  EXPECT_TRUE(got.repeats);
  ASSERT_EQ(got.native_count, 4u);
  EXPECT_EQ(got.native[3], 4u);
  EXPECT_EQ(collector.threads(), 1u);
  // More than a ring's length later its stack is gone too: a record naming it has only its own.
  got = resolve(collector, rec, words, 3 + 2 * kWindow + 1);
  EXPECT_FALSE(got.whole);
  EXPECT_EQ(got.native_count, 0u);
}

TEST(KeptStacks, ARecordNamingFramesNotKeptYieldsWhatItCarried) {
  KeptStacks collector(kWindow);
  uint64_t words[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  ring::EventRecord rec{};
  rec.event.tid = 9;
  rec.native_frames = 1;
  rec.native_reused = 3;  // nothing kept for thread 9, and it keeps nothing itself
  KeptStacks::Stack got = resolve(collector, rec, words, 10);
  EXPECT_FALSE(got.whole);
  EXPECT_EQ(got.native_count, 1u);
  EXPECT_EQ(got.native[0], 1u);
  // Kept: two frames; then a record naming 60,000 of them, and Python frames it never kept.
  rec.stack_flags = ring::kStackKept;
  rec.native_frames = 2;
  rec.native_reused = 0;
  EXPECT_TRUE(resolve(collector, rec, words, 11).whole);
  rec.native_frames = 1;
  rec.native_reused = 60000;
  rec.python_reused = 7;
  got = resolve(collector, rec, words + 4, 12);
  EXPECT_FALSE(got.whole);
  EXPECT_FALSE(got.repeats);
  ASSERT_EQ(got.native_count, 3u);  // its own, then the two kept
  EXPECT_EQ(got.native[0], 5u);
  EXPECT_EQ(got.native[1], 1u);
  EXPECT_EQ(got.native[2], 2u);
  EXPECT_EQ(got.python_count, 0u);
}

}  // namespace
