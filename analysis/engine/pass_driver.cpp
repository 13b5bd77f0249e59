#include <algorithm>

#include "memtrace/engine/pass.h"

namespace memtrace {

uint64_t PassDriver::run(TraceReader& reader) {
  while (const Event* event = reader.next()) feed(*event);
  uint64_t end_ns = last_t_ns_;
  if (const auto& footer = reader.footer()) end_ns = std::max(end_ns, footer->end_ns());
  finish(end_ns);
  return end_ns;
}

}  // namespace memtrace
