// The collector's end of a traced process's ring: reads published records, frees their slots.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "memtrace/ring/protocol.h"
#include "memtrace/ring/python_lines.h"

namespace memtrace {

// An event copied out of shared memory, so the producer can reuse its slots: the event as the
// injector recorded it, its place in the order, and what its stack's frames are.
// A Python code object as the injector described it.
struct CodeDescription {
  uint64_t id = 0;
  std::string name, file;
  int32_t first_line = 0;
  python::LineTable format = python::LineTable::kLines;
  std::string table;  // its line table, in FORMAT
};

struct RingEvent {
  uint64_t seq = 0;
  uint8_t python_state = 0;  // ring::PythonState
  bool stack_truncated = false;
  // As the record came (ring::EventRecord): its stack is its thread's kept one, and ends with the
  // outermost native_reused and python_reused frames of the kept one before it (KeptStacks makes
  // it whole); the ring slot it came in.
  bool stack_kept = false;
  uint16_t native_reused = 0, python_reused = 0;
  uint64_t ring_index = 0;
  Event event;
};

// The event of REC, the record at ring slot INDEX.
RingEvent ring_event_of(const ring::EventRecord& rec, uint64_t index);

// A thread's recorded call in progress (RingHeader::InCall). SEQ is the call's place in the order
// plus one, 0 when it took none yet; T_NS the time it took it then.
struct CallInProgress {
  uint32_t tid = 0;
  uint16_t api = 0;
  uint64_t seq = 0;
  uint64_t t_ns = 0;
};

// What a drained ring hands over, record by record, in ring order.
class RecordSink {
 public:
  virtual ~RecordSink() = default;
  // NATIVE: return addresses, innermost first; PYTHON: (code object, line) pairs (those the record
  // carried: KeptStacks adds the ones it took from the thread's kept stack); NAME: an NVTX mark's
  // or range's message (empty for allocations), valid during the call.
  virtual void on_event(RingEvent& event, const uint64_t* native, size_t native_count, const uint64_t* python,
                        size_t python_count, std::string_view name) = 0;
  virtual void on_module(uint64_t bias, uint64_t start, uint64_t end, std::string path) = 0;
  virtual void on_code(CodeDescription code) = 0;
  virtual void on_device(int32_t ordinal, std::string name, uint64_t total_bytes, const uint8_t (&uuid)[16]) = 0;
  virtual void on_started(uint32_t tid, uint16_t api, uint64_t t_ns) = 0;
  virtual void on_notice(std::string text) = 0;
};

class RingConsumer {
 public:
  explicit RingConsumer(ring::Mapping mapping) : ring_(mapping) {}
  ~RingConsumer() { ring::unmap_ring(ring_); }
  RingConsumer(const RingConsumer&) = delete;
  RingConsumer& operator=(const RingConsumer&) = delete;

  // What a drain took: the events among the records, and the ring's slot positions it went past
  // (records and what a dead producer left).
  struct Drained {
    size_t events = 0;
    size_t taken = 0;
  };
  // Hands the published records to SINK, at most MAX_TAKEN of them and never more than one ring's
  // worth. When PRODUCER_GONE, slots that will never be published (their writer died) are stepped
  // over and counted.
  Drained drain(RecordSink& sink, bool producer_gone, size_t max_taken = SIZE_MAX);

  uint64_t incomplete_records() const { return incomplete_; }
  uint64_t malformed_records() const { return malformed_; }
  uint64_t dropped_events() const { return ring_.header->dropped_events.load(std::memory_order_acquire); }
  uint64_t slot_count() const { return ring_.data_bytes / ring::kSlotBytes; }
  uint64_t longest_wait_ns() const { return ring_.header->longest_wait_ns.load(std::memory_order_acquire); }
  // Sequence numbers of events the producer dropped, from the first not yet taken.
  void take_dropped(std::vector<uint64_t>& out);
  // When each thread's latest dropped event was dropped, by tid (CLOCK_MONOTONIC), for the
  // threads the ring had room to note.
  std::unordered_map<uint32_t, uint64_t> thread_drops() const;
  // The calls the in-call table says threads are inside (RingHeader::InCall), as its slots hold
  // them now: for a process that died, the calls it died inside, unless their record was
  // delivered or dropped first (their seq says which).
  std::vector<CallInProgress> calls_in_progress() const;

 private:
  bool deliver(const unsigned char* first, uint32_t slots, uint64_t tail, RecordSink& sink);

  ring::Mapping ring_;
  std::vector<unsigned char> payload_;
  uint64_t tail_ = 0;
  uint64_t incomplete_ = 0;
  uint64_t malformed_ = 0;
  uint64_t dropped_taken_ = 0;
};

}  // namespace memtrace
