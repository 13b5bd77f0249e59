// The traced process's end of the ring: any of its threads reserves slots, fills them and
// publishes them. Waits a bounded time for room when the ring is full, and says when a record
// could not be delivered, so the caller can count it as dropped.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "memtrace/ring/protocol.h"

namespace memtrace::ring {

class Producer {
 public:
  enum class Reserved { kYes, kStalled, kConsumerGone };

  // Makes a ring of DATA_BYTES (a power of two, at least 64 KiB) in a new memfd for process PID;
  // FD is the memfd, to hand to the consumer. False when the system refuses (nothing to undo).
  bool create(size_t data_bytes, int32_t pid, int& fd);
  // Unmaps the ring (a forked child: the parent's ring is not its own).
  void release();
  bool ok() const { return ring_.ok(); }
  const Mapping& mapping() const { return ring_; }

  // How long a full ring may hold a producer up before records are dropped; and the socket whose
  // hang-up says the consumer is gone (-1: never asked).
  void set_max_stall_ns(uint64_t ns) { max_stall_ns_ = ns; }
  void set_consumer_socket(int socket) { consumer_socket_ = socket; }

  // The next sequence number: an event's place in the causal order.
  uint64_t next_seq() { return ring_.header->next_seq.fetch_add(1, std::memory_order_relaxed); }

  // Reserves SLOTS slots at INDEX, waiting while the ring is full up to the stall bound (once:
  // after a stall, later records do not wait until the ring has room again).
  Reserved reserve(uint32_t slots, uint64_t& index);
  // The same for a record of NEAR slots where it lands within reach of slot SINCE, of FAR slots
  // further on: SLOTS says which was reserved.
  Reserved reserve_after(uint64_t since, uint32_t near, uint32_t far, uint32_t& slots, uint64_t& index);
  // Whether slot INDEX lies at most the ring's length (slot_count) after slot SINCE.
  bool within_reach(uint64_t since, uint64_t index) const { return index - since <= ring_.header->slot_count; }
  // Writes a record into SLOTS reserved slots from INDEX: the payload into the continuation slots
  // first, then the first slot (FIRST: a record of kSlotBytes), whose state is published last.
  void write(uint64_t index, uint32_t type, uint32_t slots, const void* first, const void* payload, size_t bytes);
  // Reserves and writes; what reserve() said.
  Reserved publish(uint32_t type, const void* first, const void* payload, size_t bytes);
  // An event of thread TID the producer could not deliver: the consumer need not wait for SEQ,
  // and knows the thread's call ended. An observation memtrace made itself (a sample of the
  // device) is not COUNTED as a lost event: nothing the program did is missing.
  void count_dropped(uint64_t seq, uint32_t tid, bool counted = true);

  // A free slot of the in-call table, now thread TID's (RingHeader::InCall); null when every slot
  // is taken. The thread gives it back with release_in_call when it exits.
  RingHeader::InCall* claim_in_call(uint32_t tid);
  static void release_in_call(RingHeader::InCall* slot);

 private:
  bool consumer_gone() const;
  void note_thread_drop(uint32_t tid);
  void note_wait(uint64_t started_ns);

  Mapping ring_;
  uint64_t max_stall_ns_ = 10'000'000'000ull;
  int consumer_socket_ = -1;
  std::atomic<bool> stalled_{false};
};

uint64_t monotonic_ns();

}  // namespace memtrace::ring
