// One recorded event as the writer takes it and the reader gives it back.
#pragma once

#include <cstdint>

#include "memtrace/format/api.h"

namespace memtrace {

// The result of a call the process died inside: it may or may not have happened.
inline constexpr int32_t kInterruptedCall = -1;

struct Event {
  uint64_t t_ns = 0;  // relative to the run's time origin
  uint32_t tid = 0;
  Api api = Api::kUnknown;
  MemKind kind = MemKind::kUnknown;
  Layer layer = Layer::kReserved;
  int32_t device = -1;
  uint64_t stream = 0;
  uint64_t addr = 0;
  uint64_t size = 0;
  uint64_t aux = 0;
  int32_t result = 0;
  uint64_t stack_id = 0;
  // An allocation that failed for lack of memory: the device's free and total bytes then.
  uint64_t device_free = 0;
  uint64_t device_total = 0;
  uint32_t flags = 0;  // EventFlags

  bool ok() const { return result == 0; }
  bool interrupted() const { return result == kInterruptedCall; }
  Op op() const { return api_info(api).op; }
  bool captured() const { return flags & kEventCaptured; }
};

}  // namespace memtrace
