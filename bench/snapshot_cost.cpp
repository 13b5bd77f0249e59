// The cost of an out-of-memory snapshot with many allocations live: N small allocations (256 B,
// from a few sites), then, with --oom, one that the device refuses, and the program exits. memtrace
// writes a snapshot of everything live at the failure; the time it takes is the difference between
// the run with --oom and the one without.
//   snapshot_cost [--live N] [--oom]
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

__attribute__((noinline)) void* weights(size_t bytes) {
  void* p = nullptr;
  return cudaMalloc(&p, bytes) == cudaSuccess ? p : nullptr;
}
__attribute__((noinline)) void* activations(size_t bytes) {
  void* p = nullptr;
  return cudaMalloc(&p, bytes) == cudaSuccess ? p : nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  long live = 1'000'000;
  bool oom = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--live") == 0 && i + 1 < argc) live = std::atol(argv[++i]);
    if (std::strcmp(argv[i], "--oom") == 0) oom = true;
  }
  std::vector<void*> held;
  held.reserve(static_cast<size_t>(live));
  for (long i = 0; i < live; ++i) held.push_back(i % 2 ? weights(256) : activations(256));
  void* huge = nullptr;
  const bool refused = oom && cudaMalloc(&huge, size_t{1} << 50) == cudaErrorMemoryAllocation;
  std::printf("{\"live\": %ld, \"oom\": %s}\n", live, refused ? "true" : "false");
  return 0;  // exits holding everything, as a program that dies of its OOM does
}
