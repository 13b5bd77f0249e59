// The summary reader (memtrace's .memsum, made to be copied between machines) under libFuzzer: any
// bytes give an analysis or one sentence, within the reader's bounds (analysis/engine/summary.cpp),
// never a crash, an escaped exception or unbounded memory.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "memtrace/engine/summary.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const int fd = ::memfd_create("summary", 0);
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) return 0;
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  memtrace::AnalysisOptions commands, with_timeline;
  with_timeline.timeline = true;
  for (const memtrace::AnalysisOptions& wanted : {commands, with_timeline}) {
    memtrace::ProcessAnalysis out;
    std::string error;
    memtrace::read_summary(path, wanted, out, error);
  }
  return 0;
}
