// Trace write and read throughput on the events of a real trace: the collector's writer, with
// and without compression, and the reader every command uses.
//   trace_io_bench TRACE [benchmark flags]
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "memtrace/format/trace_reader.h"
#include "memtrace/format/trace_writer.h"

namespace {

std::vector<memtrace::Event> g_events;
std::string g_source;

std::string scratch_path() { return "/tmp/memtrace-io-bench-" + std::to_string(::getpid()) + ".memtrace"; }

void write_all(const std::string& path, int compression) {
  std::remove(path.c_str());
  std::string error;
  auto writer = memtrace::TraceWriter::create(path, error, compression);
  memtrace::pb::TraceHeader header;
  writer->write_header(header);
  for (const auto& e : g_events) writer->add(e);
  writer->finish(memtrace::pb::Footer());
}

void BM_Write(benchmark::State& state) {
  const std::string path = scratch_path();
  for (auto _ : state) write_all(path, static_cast<int>(state.range(0)));
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(g_events.size()));
  std::remove(path.c_str());
}
BENCHMARK(BM_Write)->Arg(0)->Arg(1)->Arg(3)->Unit(benchmark::kMillisecond);

void BM_Read(benchmark::State& state) {
  const std::string path = scratch_path();
  write_all(path, static_cast<int>(state.range(0)));
  for (auto _ : state) {
    std::string error;
    auto reader = memtrace::TraceReader::open(path, error);
    memtrace::Event e;
    while (reader->next(e)) benchmark::DoNotOptimize(e.size);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(g_events.size()));
  std::remove(path.c_str());
}
BENCHMARK(BM_Read)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: trace_io_bench TRACE [benchmark flags]\n");
    return 2;
  }
  std::string error;
  auto reader = memtrace::TraceReader::open(argv[1], error);
  if (!reader) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 1;
  }
  memtrace::Event e;
  while (reader->next(e)) {
    e.stack_id = 0;  // the stacks stay behind in the source trace: events only
    g_events.push_back(e);
  }
  argv[1] = argv[0];
  ++argv;
  --argc;
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  return 0;
}
