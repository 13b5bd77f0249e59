// The injector's link to the collector: connects lazily on the first recorded call, owns the
// ring, and becomes a pass-through whenever there is no collector to talk to.
#pragma once

#include <cstdint>

#include "memtrace/format/api.h"

namespace memtrace::inject {

// What an interposer knows about one call, filled in around the real call.
struct CallRecord {
  Api api = Api::kUnknown;
  MemKind kind = MemKind::kUnknown;
  int32_t device = -1;
  int32_t result = 0;
  uint64_t addr = 0;
  uint64_t size = 0;
  uint64_t stream = 0;
  uint64_t aux = 0;
  uint64_t caller = 0;
  uint64_t seq = 0;
  uint64_t t_ns = 0;
};

// True when this process records events (connecting to the collector on first use).
bool session_active();

// Takes the event's place in the causal order: its sequence number and timestamp.
void stamp(CallRecord& record);

// Hands a stamped record to the collector. Waits a bounded time if the ring is full; counts the
// event as dropped if it cannot be delivered.
void publish(const CallRecord& record);

uint64_t monotonic_ns();

}  // namespace memtrace::inject
