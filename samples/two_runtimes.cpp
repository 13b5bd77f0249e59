// Two copies of the CUDA runtime in one process: the program's own (libcudart.so.13, in the global
// scope) and a plugin's vendored copy (loaded RTLD_LOCAL). Each keeps its own current device and
// last error; every call must reach the copy its caller was linked against. The plugin makes
// device 1 current in its runtime and allocates there; the program allocates on device 0 through
// its own; a failed call in the plugin sets the plugin's last error and not the program's. Each
// also takes driver functions from its own runtime's cudaGetDriverEntryPoint, which asks at that
// runtime's version: the plugin (CUDA 12.2) gets cuGraphAddNode's 12.2 ABI, the program (13.0)
// its 12.3 one, and each makes a graph allocation node and its free with it (1 MiB, 2 MiB).
// Prints what each runtime saw, which must be the same with and without memtrace.
//   two_runtimes DIR   (needs two devices: memtrace run --sim --sim-devices 2)
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdio>

#include "sample_account.h"
#include "vendored_runtime.h"

namespace {

// A 2 MiB graph allocation node and its free, through the cuGraphAddNode this runtime hands out.
int driver_entry_points() {
  using AddNode =
      CUresult (*)(CUgraphNode*, CUgraph, const CUgraphNode*, const CUgraphEdgeData*, size_t, CUgraphNodeParams*);
  void* add_node = nullptr;
  cudaDriverEntryPointQueryResult found;
  SAMPLE_CHECK(cudaGetDriverEntryPoint("cuGraphAddNode", &add_node, cudaEnableDefault, &found));
  cudaGraph_t graph;
  SAMPLE_CHECK(cudaGraphCreate(&graph, 0));
  CUgraphNodeParams alloc{};
  alloc.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
  alloc.alloc.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  alloc.alloc.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  alloc.alloc.bytesize = 2 << 20;
  CUgraphNode allocated, freed;
  auto g = reinterpret_cast<CUgraph>(graph);
  if (reinterpret_cast<AddNode>(add_node)(&allocated, g, nullptr, nullptr, 0, &alloc) != CUDA_SUCCESS) return 1;
  CUgraphNodeParams free_node{};
  free_node.type = CU_GRAPH_NODE_TYPE_MEM_FREE;
  free_node.free.dptr = alloc.alloc.dptr;
  if (reinterpret_cast<AddNode>(add_node)(&freed, g, &allocated, nullptr, 1, &free_node) != CUDA_SUCCESS) return 1;
  SAMPLE_CHECK(cudaGraphDestroy(graph));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  sample::Account account;
  if (argc < 2) {
    std::fprintf(stderr, "usage: two_runtimes DIR\n");
    return 2;
  }
  sample::VendoredPlugin plugin = sample::VendoredPlugin::load(argv[1]);
  constexpr size_t kMiB = 1 << 20;

  void* mine = nullptr;
  SAMPLE_CHECK(cudaMalloc(&mine, 1 * kMiB));  // the program's runtime, device 0
  account.call("cudaMalloc", true);
  account.live(0, kMiB);

  SAMPLE_CHECK(plugin.set_device(1));
  void* theirs = nullptr;
  SAMPLE_CHECK(plugin.malloc(&theirs, 2 * kMiB));  // the plugin's runtime, its device 1
  account.call("cudaMalloc", true);
  account.live(1, 2 * kMiB);

  void* mine_again = nullptr;
  SAMPLE_CHECK(cudaMalloc(&mine_again, 3 * kMiB));  // still device 0 for the program's runtime
  account.call("cudaMalloc", true);
  account.live(0, 3 * kMiB);

  int failed = plugin.malloc(nullptr, kMiB);  // an error in the plugin's runtime only
  account.call("cudaMalloc", failed == 0);

  std::printf("program's buffers on devices %d and %d; plugin's buffer on device %d\n", plugin.device_of(mine),
              plugin.device_of(mine_again), plugin.device_of(theirs));
  std::printf("failed plugin call: %d; last error: plugin's runtime %d, program's runtime %d\n", failed,
              plugin.last_error(), static_cast<int>(cudaGetLastError()));

  const int plugins = plugin.driver_entry_points();
  const int programs = driver_entry_points();
  std::printf("driver entry points: plugin's %d, program's %d\n", plugins, programs);

  SAMPLE_CHECK(plugin.free(theirs));
  account.call("cudaFree", true);
  account.live(1, -static_cast<int64_t>(2 * kMiB));
  for (void* p : {mine, mine_again}) SAMPLE_CHECK(cudaFree(p));
  account.call("cudaFree", true);
  account.call("cudaFree", true);
  account.live(0, -static_cast<int64_t>(4 * kMiB));
  std::fflush(stdout);
  account.print();
  return 0;
}
