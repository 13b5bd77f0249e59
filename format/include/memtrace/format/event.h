// One event, declared once: what the injector records of a call, what the event ring carries
// (ring/include/memtrace/ring/protocol.h embeds it as it is), what the trace writer takes and
// the reader gives back. Header-only and trivially copyable, so it can live in shared memory.
#pragma once

#include <cstdint>
#include <type_traits>

#include "memtrace/format/api.h"

namespace memtrace {

// The result of a call the process died inside: it may or may not have happened.
inline constexpr int32_t kInterruptedCall = -1;

struct Event {
  // In a trace, ns since the run's time origin; in the ring, the injector's CLOCK_MONOTONIC.
  uint64_t t_ns = 0;
  uint64_t addr = 0;  // the object: an address, or a VMM physical handle
  uint64_t size = 0;
  uint64_t stream = 0;
  uint64_t handle = 0;    // a VMM mapping: the physical handle it maps; a pool allocation: the pool
  uint64_t heap = 0;      // an allocated-layer region: its heap's base address
  uint64_t name = 0;      // an NVTX mark or range edge: its name's string id (the ring carries the text)
  uint64_t stack_id = 0;  // the trace's stack; 0 for none
  // An allocation that failed for lack of memory: the device's free and total bytes then.
  uint64_t device_free = 0;
  uint64_t device_total = 0;
  uint32_t tid = 0;
  int32_t device = -1;
  int32_t result = 0;
  uint32_t flags = 0;  // EventFlags
  Api api = Api::kUnknown;
  MemKind kind = MemKind::kUnknown;
  Layer layer = Layer::kReserved;

  bool ok() const { return result == 0; }
  bool interrupted() const { return result == kInterruptedCall; }
  Op op() const { return api_info(api).op; }
  bool captured() const { return flags & kEventCaptured; }
};
static_assert(std::is_trivially_copyable_v<Event> && sizeof(Event) == 104, "the ring's slots hold an Event");

// The field AuxField names for the event's API, which a trace keeps in one column; 0 for none.
inline uint64_t aux_value(const Event& e) {
  switch (api_info(e.api).aux) {
    case AuxField::kHandle: return e.handle;
    case AuxField::kHeap: return e.heap;
    case AuxField::kName: return e.name;
    default: return 0;
  }
}
inline void set_aux_value(Event& e, uint64_t value) {
  switch (api_info(e.api).aux) {
    case AuxField::kHandle: e.handle = value; break;
    case AuxField::kHeap: e.heap = value; break;
    case AuxField::kName: e.name = value; break;
    default: break;
  }
}

}  // namespace memtrace
