// libFuzzer target: any bytes given to the trace reader end in events read, or a message; never
// a crash, a hang, a leak, or memory beyond the chunk limit.
#include <cstdint>
#include <cstdio>
#include <string>

#include "memtrace/format/trace_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::FILE* file = fmemopen(const_cast<uint8_t*>(data), size, "rb");
  if (!file) return 0;
  std::string error;
  auto reader = memtrace::TraceReader::open(file, "fuzz input", error);
  if (!reader) return 0;
  memtrace::Event event;
  uint64_t sum = 0;
  while (reader->next(event)) {
    // Everything an analysis would look up must be there.
    if (const auto* stack = reader->stack(event.stack_id)) {
      for (uint64_t id : *stack) {
        const auto* frame = reader->frame(id);
        if (!frame) __builtin_trap();
        sum += reader->string(frame->function()).size() + reader->string(frame->module()).size();
      }
    }
    sum += event.size + reader->stack_flags(event.stack_id);
  }
  if (!reader->footer() && reader->problem().empty()) __builtin_trap();  // an end must be explained
  return static_cast<int>(sum & 0);
}
