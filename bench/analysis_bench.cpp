// Where the time of an analysis goes, on one trace: reading alone (chunks read ahead on a second
// thread, as the analyses do), reading and replaying, and the whole pass `memtrace peak` and `memtrace leaks` make
// (report, steps, growth).
//   analysis_bench TRACE
#include <chrono>
#include <cstdio>
#include <string>

#include "memtrace/engine/process_analysis.h"
#include "memtrace/engine/replay.h"
#include "memtrace/format/trace_reader.h"

namespace {

template <typename Fn>
void timed(const char* what, Fn&& fn) {
  auto start = std::chrono::steady_clock::now();
  uint64_t events = fn();
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%-34s %12llu events  %7.3f s  %7.2f M events/s\n", what, static_cast<unsigned long long>(events), s,
              static_cast<double>(events) / s / 1e6);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace memtrace;
  if (argc < 2) {
    std::fprintf(stderr, "usage: analysis_bench TRACE [read|replay|analysis]\n");
    return 2;
  }
  const std::string only = argc > 2 ? argv[2] : "";
  std::string error;
  if (only.empty() || only == "read")
    timed("read", [&] {
      auto reader = TraceReader::open(argv[1], error);
      if (reader) reader->prefetch();
      uint64_t n = 0;
      Event e;
      while (reader && reader->next(e)) ++n;
      return n;
    });
  if (only.empty() || only == "replay")
    timed("read + replay", [&] {
      auto reader = TraceReader::open(argv[1], error);
      if (reader) reader->prefetch();
      uint64_t n = 0;
      Event e;
      Replay replay;
      while (reader && reader->next(e)) {
        replay.apply(e);
        ++n;
      }
      return n;
    });
  if (only.empty() || only == "analysis")
    timed("peak + leaks (one pass)", [&] {
      ProcessAnalysis out;
      if (!analyze_process(argv[1], AnalysisOptions(), out, error)) std::fprintf(stderr, "%s\n", error.c_str());
      return out.report.events;
    });
  return 0;
}
