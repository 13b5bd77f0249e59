#include <gtest/gtest.h>

#include "event_sequencer.h"

namespace {

using memtrace::EventSequencer;
using memtrace::RingEvent;

RingEvent with_seq(uint64_t seq) {
  RingEvent e{};
  e.seq = seq;
  return e;
}

TEST(EventSequencer, ReleasesInSequenceOrder) {
  EventSequencer s;
  std::vector<uint64_t> out;
  auto emit = [&](const RingEvent& e) { out.push_back(e.seq); };
  for (uint64_t seq : {1, 2, 0, 4, 3, 5}) s.push(with_seq(seq), emit);
  EXPECT_EQ(out, (std::vector<uint64_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(s.held(), 0u);
}

TEST(EventSequencer, HoldsBackBehindAGapUntilFilledOrSkipped) {
  EventSequencer s;
  std::vector<uint64_t> out;
  auto emit = [&](const RingEvent& e) { out.push_back(e.seq); };
  s.push(with_seq(0), emit);
  s.push(with_seq(2), emit);
  s.push(with_seq(3), emit);
  EXPECT_EQ(out, (std::vector<uint64_t>{0}));
  EXPECT_EQ(s.held(), 2u);
  s.skip(1, emit);  // the producer dropped 1
  EXPECT_EQ(out, (std::vector<uint64_t>{0, 2, 3}));
  s.push(with_seq(5), emit);
  s.flush(emit);  // the process is gone: 4 will never come
  EXPECT_EQ(out, (std::vector<uint64_t>{0, 2, 3, 5}));
  s.push(with_seq(4), emit);  // late, but still delivered
  EXPECT_EQ(out.back(), 4u);
}

}  // namespace
