// The cost of one cudaMalloc+cudaFree pair, the unit of the injector's overhead. Run it plainly
// and under `memtrace run` (bench/overhead does both) and compare.
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

static void BM_MallocFreePair(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  void* warm = nullptr;
  if (cudaMalloc(&warm, 256) != cudaSuccess) {
    state.SkipWithError("no CUDA device (run with the simulated device on the library path)");
    return;
  }
  cudaFree(warm);
  for (auto _ : state) {
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess) state.SkipWithError("cudaMalloc failed");
    benchmark::DoNotOptimize(p);
    cudaFree(p);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_MallocFreePair)->Arg(4096)->Arg(64 << 20)->MinTime(1.0);

// cudaFree(nullptr) does almost nothing in the runtime but is still a recorded event: the
// difference with and without memtrace is the injector's own cost per event.
static void BM_RecordedNoOpFree(benchmark::State& state) {
  if (cudaFree(nullptr) != cudaSuccess) {
    state.SkipWithError("no CUDA device (run with the simulated device on the library path)");
    return;
  }
  for (auto _ : state) benchmark::DoNotOptimize(cudaFree(nullptr));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RecordedNoOpFree)->MinTime(0.5);

BENCHMARK_MAIN();
