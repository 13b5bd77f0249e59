#include "ring_consumer.h"

#include <cstring>

namespace memtrace {

size_t RingConsumer::drain(std::vector<RawEvent>& out, bool producer_gone) {
  ring::RingHeader* h = ring_.header;
  const uint64_t slots = h->slot_count;
  uint64_t tail = h->tail.load(std::memory_order_relaxed);
  uint64_t head = h->head.load(std::memory_order_acquire);
  // The header is the traced process's memory: never trust it further than the ring's size.
  if (head - tail > slots) head = tail + slots;
  size_t taken = 0;
  while (tail < head) {
    auto* rec = reinterpret_cast<ring::EventRecord*>(ring::slot_at(ring_, tail));
    uint32_t state = rec->state.load(std::memory_order_acquire);
    uint32_t n = ring::state_slots(state);
    if (ring::state_type(state) == ring::kSlotEvent && n >= 1 && n <= head - tail) {
      out.push_back(RawEvent{rec->api, rec->kind, rec->device, rec->result, rec->tid, rec->seq, rec->t_ns, rec->addr,
                             rec->size, rec->stream, rec->aux, rec->caller});
      for (uint32_t i = 0; i < n; ++i)
        reinterpret_cast<ring::EventRecord*>(ring::slot_at(ring_, tail + i))
            ->state.store(ring::kSlotFree, std::memory_order_relaxed);
      tail += n;
      ++taken;
    } else if (producer_gone) {
      rec->state.store(ring::kSlotFree, std::memory_order_relaxed);
      if (ring::state_type(state) != ring::kSlotContinuation) ++incomplete_;
      tail += 1;
    } else {
      break;  // a writer is still filling this slot
    }
    if ((taken & 63) == 0) h->tail.store(tail, std::memory_order_release);
  }
  h->tail.store(tail, std::memory_order_release);
  return taken;
}

void RingConsumer::take_dropped(std::vector<uint64_t>& out) {
  ring::RingHeader* h = ring_.header;
  uint64_t count = h->dropped_log_count.load(std::memory_order_acquire);
  if (count > ring::kDroppedLogSize) count = ring::kDroppedLogSize;
  for (; dropped_taken_ < count; ++dropped_taken_) {
    uint64_t entry = h->dropped_log[dropped_taken_].load(std::memory_order_acquire);
    if (entry == 0) break;  // claimed, not yet written: next time
    out.push_back(entry - 1);
  }
}

}  // namespace memtrace
