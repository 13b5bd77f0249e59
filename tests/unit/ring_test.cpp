// The ring protocol between threads of one process, through the injector's producer and the
// collector's consumer: every published record arrives once, slots a dead writer left
// unpublished are stepped over, a full ring holds a producer up only so long, and a consumer
// that went away is noticed.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "memtrace/ring/consumer.h"
#include "memtrace/ring/producer.h"

namespace {

using namespace memtrace;

struct Collected : RecordSink {
  std::vector<RingEvent> events;
  void on_event(RingEvent& e, const uint64_t*, size_t, const uint64_t*, size_t, std::string_view) override {
    events.push_back(e);
  }
  void on_module(uint64_t, uint64_t, uint64_t, std::string) override {}
  void on_code(CodeDescription) override {}
  void on_device(int32_t, std::string, uint64_t, const uint8_t (&)[16]) override {}
  void on_started(uint32_t, uint16_t, uint64_t) override {}
  void on_notice(std::string) override {}
};

// The injector's producer and the collector's consumer on one memfd, in one process.
struct TestRing {
  ring::Producer producer;
  std::unique_ptr<RingConsumer> consumer;
  explicit TestRing(size_t data_bytes) {
    int fd = -1;
    EXPECT_TRUE(producer.create(data_bytes, ::getpid(), fd));
    producer.set_max_stall_ns(0);  // a full ring: report it at once, the writers retry
    consumer = std::make_unique<RingConsumer>(ring::map_ring(fd, data_bytes));
    ::close(fd);
  }
  ~TestRing() { producer.release(); }

  // Publishes event SEQ (size seq * 3); without COMMIT its slot is reserved but never published,
  // as by a writer that died.
  bool publish(uint64_t seq, bool commit = true) {
    ring::EventRecord rec{};
    rec.seq = seq;
    rec.event.size = seq * 3;
    if (commit) return producer.publish(ring::kSlotEvent, &rec, nullptr, 0) == ring::Producer::Reserved::kYes;
    uint64_t index;
    return producer.reserve(1, index) == ring::Producer::Reserved::kYes;
  }
};

TEST(RingConsumer, ManyWritersEveryRecordOnce) {
  TestRing ring(64 << 10);  // 512 slots: writers wrap around many times
  constexpr int kThreads = 4;
  constexpr uint64_t kPerThread = 20000;
  std::atomic<uint64_t> next_seq{0};
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t)
    writers.emplace_back([&] {
      for (uint64_t i = 0; i < kPerThread; ++i) {
        uint64_t seq = next_seq.fetch_add(1);
        while (!ring.publish(seq)) std::this_thread::yield();
      }
    });
  std::vector<bool> seen(kThreads * kPerThread, false);
  Collected out;
  uint64_t received = 0;
  while (received < kThreads * kPerThread) {
    out.events.clear();
    ring.consumer->drain(out, false);
    for (const RingEvent& e : out.events) {
      ASSERT_LT(e.seq, seen.size());
      ASSERT_FALSE(seen[e.seq]) << "record " << e.seq << " arrived twice";
      ASSERT_EQ(e.event.size, e.seq * 3) << "record " << e.seq << " arrived torn";
      seen[e.seq] = true;
      ++received;
    }
  }
  for (auto& w : writers) w.join();
  EXPECT_EQ(ring.consumer->incomplete_records(), 0u);
}

TEST(RingConsumer, StepsOverWhatADeadWriterLeft) {
  TestRing ring(64 << 10);
  ring.publish(0);
  ring.publish(1, /*commit=*/false);  // the writer died here
  ring.publish(2);
  Collected out;
  ring.consumer->drain(out, false);
  ASSERT_EQ(out.events.size(), 1u);  // waits behind the unpublished slot while the process lives
  ring.consumer->drain(out, true);
  ASSERT_EQ(out.events.size(), 2u);
  EXPECT_EQ(out.events[1].seq, 2u);
  EXPECT_EQ(ring.consumer->incomplete_records(), 1u);
}

// The collector copies a ring batch by batch (TracedProcess::kBatchRecords): a drain stops at its
// bound, says how far it went, and the next goes on from there, through a dead writer's slot too.
TEST(RingConsumer, ADrainTakesAtMostWhatItIsToldAndTheNextGoesOn) {
  TestRing ring(64 << 10);
  for (uint64_t seq = 0; seq < 5; ++seq) ring.publish(seq);
  ring.publish(5, /*commit=*/false);
  ring.publish(6);
  Collected out;
  RingConsumer::Drained first = ring.consumer->drain(out, false, 3);
  EXPECT_EQ(first.events, 3u);
  EXPECT_EQ(first.taken, 3u);
  RingConsumer::Drained second = ring.consumer->drain(out, false, 3);
  EXPECT_EQ(second.events, 2u);
  EXPECT_EQ(second.taken, 2u) << "stops behind the unpublished slot while the process lives";
  RingConsumer::Drained last = ring.consumer->drain(out, true, 3);
  EXPECT_EQ(last.events, 1u);
  EXPECT_EQ(last.taken, 2u) << "the dead writer's slot, then event 6";
  ASSERT_EQ(out.events.size(), 6u);
  for (uint64_t i = 0; i < 5; ++i) EXPECT_EQ(out.events[i].seq, i);
  EXPECT_EQ(out.events[5].seq, 6u);
  EXPECT_EQ(ring.consumer->drain(out, true, 3).taken, 0u);
}

TEST(RingProducer, AFullRingHoldsTheProducerUpToTheBoundThenItsEventsAreDropped) {
  TestRing ring(64 << 10);
  ring.producer.set_max_stall_ns(50'000'000);
  uint64_t published = 0;
  while (ring.publish(published)) ++published;  // nobody drains: the ring fills, then one stall
  EXPECT_EQ(published, (64u << 10) / ring::kSlotBytes);
  EXPECT_GE(ring.consumer->longest_wait_ns(), 50'000'000u) << "gave up before the bound";
  ring.producer.count_dropped(published, 7);
  // Once stalled, the next record gives up at once instead of waiting again.
  EXPECT_FALSE(ring.publish(published + 1));
  ring.producer.count_dropped(published + 1, 7);

  std::vector<uint64_t> dropped;
  ring.consumer->take_dropped(dropped);
  EXPECT_EQ(dropped, (std::vector<uint64_t>{published, published + 1}));
  EXPECT_EQ(ring.consumer->dropped_events(), 2u);
  Collected out;
  ring.consumer->drain(out, false);
  EXPECT_EQ(out.events.size(), published);
  EXPECT_TRUE(ring.publish(published + 2)) << "room again: no longer stalled";
}

TEST(RingProducer, EachThreadsLatestDropIsKnownForAsManyThreadsAsItHasRoomFor) {
  TestRing ring(64 << 10);
  uint64_t before = ring::monotonic_ns();
  ring.producer.count_dropped(0, 7);
  ring.producer.count_dropped(1, 7 + ring::kThreadDropSlots);  // the same first slot: the next one
  uint64_t first_of_7 = ring.consumer->thread_drops().at(7);
  ring.producer.count_dropped(2, 7);
  auto drops = ring.consumer->thread_drops();
  EXPECT_EQ(drops.size(), 2u);
  EXPECT_GE(first_of_7, before);
  EXPECT_GE(drops.at(7), first_of_7) << "the latest drop of thread 7";
  EXPECT_GE(drops.at(7 + ring::kThreadDropSlots), before);

  for (uint32_t tid = 1000; tid < 1000 + ring::kThreadDropSlots; ++tid) ring.producer.count_dropped(3, tid);
  drops = ring.consumer->thread_drops();
  EXPECT_EQ(drops.size(), ring::kThreadDropSlots) << "every slot taken, each by one thread";
  EXPECT_EQ(drops.count(7), 1u);
  EXPECT_EQ(ring.consumer->dropped_events(), 3u + ring::kThreadDropSlots) << "all counted, placed or not";
}

TEST(RingProducer, EachThreadHasAnInCallSlotWhileTheTableHasRoom) {
  TestRing ring(64 << 10);
  ring::RingHeader::InCall* first = ring.producer.claim_in_call(7);
  ASSERT_NE(first, nullptr);
  EXPECT_TRUE(ring.consumer->calls_in_progress().empty()) << "claimed, in no call yet";
  first->api.store(static_cast<uint32_t>(Api::kCudaFree) + 1);
  first->t_ns.store(1234);
  first->seq.store(42);
  std::vector<CallInProgress> calls = ring.consumer->calls_in_progress();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].tid, 7u);
  EXPECT_EQ(calls[0].api, static_cast<uint16_t>(Api::kCudaFree));
  EXPECT_EQ(calls[0].seq, 42u);
  EXPECT_EQ(calls[0].t_ns, 1234u);

  std::vector<ring::RingHeader::InCall*> others;
  for (uint32_t tid = 1000; tid < 1000 + ring::kInCallSlots - 1; ++tid)
    others.push_back(ring.producer.claim_in_call(tid));
  EXPECT_EQ(std::count(others.begin(), others.end(), nullptr), 0) << "a slot for every thread while there is room";
  EXPECT_EQ(ring.producer.claim_in_call(5000), nullptr) << "the table is full: that thread publishes records instead";
  ring::Producer::release_in_call(first);
  EXPECT_TRUE(ring.consumer->calls_in_progress().empty()) << "a thread that exited is in no call";
  EXPECT_EQ(ring.producer.claim_in_call(5000), first) << "its slot is free again";
}

// A record whose size depends on where it lands (a stack sent by reference to its thread's kept
// one, ring::kStackKept) takes its near size only within a ring's length of the slot it names:
// decided for the very slot it gets, however far other writers moved the ring on meanwhile.
TEST(RingProducer, ARecordIsNearOnlyWithinARingsLengthOfTheSlotItNames) {
  TestRing ring(64 << 10);  // 512 slots
  ring::EventRecord rec{};
  Collected out;
  auto place = [&](uint64_t at, uint32_t slots) {
    ring.producer.write(at, ring::kSlotEvent, slots, &rec, nullptr, 0);
    ring.consumer->drain(out, false);
  };
  uint64_t since = 0, index = 0;
  uint32_t slots = 0;
  ASSERT_EQ(ring.producer.reserve(1, since), ring::Producer::Reserved::kYes);
  place(since, 1);
  const std::atomic<uint64_t>& head = ring.producer.mapping().header->head;
  while (head.load() < since + 512) {
    ASSERT_TRUE(ring.publish(1));
    ring.consumer->drain(out, false);
  }
  ASSERT_EQ(ring.producer.reserve_after(since, 1, 3, slots, index), ring::Producer::Reserved::kYes);
  EXPECT_EQ(index, since + 512);
  EXPECT_EQ(slots, 1u);
  EXPECT_TRUE(ring.producer.within_reach(since, index));
  place(index, slots);
  ASSERT_EQ(ring.producer.reserve_after(since, 1, 3, slots, index), ring::Producer::Reserved::kYes);
  EXPECT_EQ(index, since + 513);
  EXPECT_EQ(slots, 3u);
  EXPECT_FALSE(ring.producer.within_reach(since, index));
}

TEST(RingProducer, AConsumerThatHungUpIsNoticedInsteadOfWaitedFor) {
  TestRing ring(64 << 10);
  int sockets[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sockets), 0);
  ring.producer.set_consumer_socket(sockets[0]);
  ring.producer.set_max_stall_ns(60'000'000'000ull);  // a minute: the test would time out waiting
  ::close(sockets[1]);
  uint64_t index;
  for (uint64_t seq = 0; seq < (64u << 10) / ring::kSlotBytes; ++seq) ASSERT_TRUE(ring.publish(seq));
  EXPECT_EQ(ring.producer.reserve(1, index), ring::Producer::Reserved::kConsumerGone);
  ::close(sockets[0]);
}

}  // namespace
