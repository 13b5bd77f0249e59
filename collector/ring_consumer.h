// The collector's end of a traced process's ring: reads published records, frees their slots.
#pragma once

#include <cstdint>
#include <vector>

#include "memtrace/ring.h"

namespace memtrace {

// A record copied out of shared memory, so the producer can reuse its slot.
struct RawEvent {
  uint16_t api;
  uint8_t kind;
  int32_t device;
  int32_t result;
  uint32_t tid;
  uint64_t seq;
  uint64_t t_ns;
  uint64_t addr;
  uint64_t size;
  uint64_t stream;
  uint64_t aux;
  uint64_t caller;
};

class RingConsumer {
 public:
  explicit RingConsumer(ring::Mapping mapping) : ring_(mapping) {}
  ~RingConsumer() { ring::unmap_ring(ring_); }
  RingConsumer(const RingConsumer&) = delete;
  RingConsumer& operator=(const RingConsumer&) = delete;

  // Appends the published records to OUT. When PRODUCER_GONE, slots that will never be
  // published (their writer died) are stepped over and counted.
  size_t drain(std::vector<RawEvent>& out, bool producer_gone);

  uint64_t incomplete_records() const { return incomplete_; }
  uint64_t dropped_events() const { return ring_.header->dropped_events.load(std::memory_order_acquire); }
  // Sequence numbers of events the producer dropped, from the first not yet taken.
  void take_dropped(std::vector<uint64_t>& out);

 private:
  ring::Mapping ring_;
  uint64_t incomplete_ = 0;
  uint64_t dropped_taken_ = 0;
};

}  // namespace memtrace
