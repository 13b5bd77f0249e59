// The cost of one recorded allocation made 30 native frames deep. cudaMalloc of zero bytes
// succeeds without touching memory, so what is measured is the call and its recording.
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

namespace {

__attribute__((noinline)) void allocate_loop(benchmark::State& state) {
  for (auto _ : state) {
    void* p = nullptr;
    benchmark::DoNotOptimize(cudaMalloc(&p, 0));
  }
}

__attribute__((noinline)) void at_depth(int depth, benchmark::State& state) {
  if (depth > 1)
    at_depth(depth - 1, state);
  else
    allocate_loop(state);
  asm volatile("" ::: "memory");  // not a tail call: every level stays on the stack
}

void BM_AllocationAtDepth(benchmark::State& state) {
  void* warm = nullptr;
  if (cudaMalloc(&warm, 256) != cudaSuccess) {
    state.SkipWithError("no CUDA device (run with the simulated device on the library path)");
    return;
  }
  cudaFree(warm);
  // benchmark's own frames and main lie below: depth counts the frames we add on top.
  at_depth(static_cast<int>(state.range(0)), state);
  state.SetItemsProcessed(state.iterations());
}

}  // namespace

BENCHMARK(BM_AllocationAtDepth)->Arg(30)->MinTime(0.5);

BENCHMARK_MAIN();
