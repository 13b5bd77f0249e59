// The ring protocol between threads of one process: every published record arrives once, and
// slots a dead writer left unpublished are stepped over.
#include "ring_consumer.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <thread>

namespace {

using namespace memtrace;

struct Collected : RecordSink {
  std::vector<RawEvent> events;
  void on_event(RawEvent& e, const uint64_t*, size_t, const uint64_t*, size_t, std::string_view) override { events.push_back(e); }
  void on_module(uint64_t, uint64_t, uint64_t, std::string) override {}
  void on_code(uint64_t, std::string, std::string) override {}
  void on_device(int32_t, std::string, uint64_t, const uint8_t (&)[16]) override {}
  void on_started(uint32_t, uint16_t, uint64_t) override {}
};

struct TestRing {
  ring::Mapping producer;
  std::unique_ptr<RingConsumer> consumer;
  explicit TestRing(size_t data_bytes) {
    int fd = static_cast<int>(::syscall(SYS_memfd_create, "test-ring", 0));
    EXPECT_EQ(::ftruncate(fd, static_cast<off_t>(ring::kHeaderBytes + data_bytes)), 0);
    producer = ring::map_ring(fd, data_bytes);
    producer.header->slot_count = data_bytes / ring::kSlotBytes;
    consumer = std::make_unique<RingConsumer>(ring::map_ring(fd, data_bytes));
    ::close(fd);
  }
  ~TestRing() { ring::unmap_ring(producer); }

  // The injector's protocol, minus the bounded wait: reserve, fill, publish.
  bool publish(uint64_t seq, bool commit = true) {
    ring::RingHeader* h = producer.header;
    uint64_t head = h->head.load();
    do {
      if (head - h->tail.load(std::memory_order_acquire) >= h->slot_count) return false;
    } while (!h->head.compare_exchange_weak(head, head + 1));
    auto* rec = reinterpret_cast<ring::EventRecord*>(ring::slot_at(producer, head));
    rec->seq = seq;
    rec->size = seq * 3;
    if (commit) rec->state.store(ring::make_state(ring::kSlotEvent, 1), std::memory_order_release);
    return true;
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
    for (const RawEvent& e : out.events) {
      ASSERT_LT(e.seq, seen.size());
      ASSERT_FALSE(seen[e.seq]) << "record " << e.seq << " arrived twice";
      ASSERT_EQ(e.size, e.seq * 3) << "record " << e.seq << " arrived torn";
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

}  // namespace
