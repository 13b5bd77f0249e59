// CUDA graphs' memory nodes: a graph that allocates 8 MiB (the runtime's allocation node) and
// 4 MiB (the driver's, its functions from cudaGetDriverEntryPointByVersion as PyTorch gets the
// driver's) and frees both itself, launched three times. A graph's memory is reserved at
// its first launch and kept for the next (nvidia-smi shows it) until cudaDeviceGraphMemTrim; it is
// in none of the program's allocations. A 1 MiB cudaMalloc after the launches is the program's peak.
//   graph_memory
#include <cuda.h>
#include <cuda_runtime_api.h>

#include "driver_entry.h"
#include "sample_account.h"

namespace {

sample::Account account;
constexpr size_t kMiB = 1 << 20;

template <typename Result>
void check(const char* api, Result r) {
  account.call(api, r == 0);
  SAMPLE_CHECK(r);
}

// The graph: allocate A and B, free B, free A.
cudaGraph_t build_graph() {
  cudaGraph_t graph;
  SAMPLE_CHECK(cudaGraphCreate(&graph, 0));

  cudaMemAllocNodeParams a{};
  a.poolProps.allocType = cudaMemAllocationTypePinned;
  a.poolProps.location.type = cudaMemLocationTypeDevice;
  a.poolProps.location.id = 0;
  a.bytesize = 8 * kMiB;
  cudaGraphNode_t alloc_a;
  check("cudaGraphAddMemAllocNode", cudaGraphAddMemAllocNode(&alloc_a, graph, nullptr, 0, &a));

  CUDA_MEM_ALLOC_NODE_PARAMS b{};
  b.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  b.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  b.poolProps.location.id = 0;
  b.bytesize = 4 * kMiB;
  CUgraphNode alloc_b, free_b;
  auto g = reinterpret_cast<CUgraph>(graph);
  static const auto add_alloc = sample::driver_entry<decltype(&cuGraphAddMemAllocNode)>("cuGraphAddMemAllocNode");
  static const auto add_free = sample::driver_entry<decltype(&cuGraphAddMemFreeNode)>("cuGraphAddMemFreeNode");
  check("cuGraphAddMemAllocNode", add_alloc(&alloc_b, g, reinterpret_cast<CUgraphNode*>(&alloc_a), 1, &b));
  check("cuGraphAddMemFreeNode", add_free(&free_b, g, &alloc_b, 1, b.dptr));

  cudaGraphNode_t free_a;
  auto after = reinterpret_cast<cudaGraphNode_t>(free_b);
  check("cudaGraphAddMemFreeNode", cudaGraphAddMemFreeNode(&free_a, graph, &after, 1, a.dptr));
  return graph;
}

}  // namespace

int main() {
  cudaStream_t stream;
  SAMPLE_CHECK(cudaStreamCreate(&stream));
  cudaGraph_t graph = build_graph();
  cudaGraphExec_t exec;
  SAMPLE_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int launch = 0; launch < 3; ++launch) SAMPLE_CHECK(cudaGraphLaunch(exec, stream));
  SAMPLE_CHECK(cudaStreamSynchronize(stream));

  void* p = nullptr;
  check("cudaMalloc", cudaMalloc(&p, kMiB));
  account.live(0, kMiB);
  check("cudaFree", cudaFree(p));
  account.live(0, -static_cast<int64_t>(kMiB));

  SAMPLE_CHECK(cudaGraphExecDestroy(exec));
  SAMPLE_CHECK(cudaGraphDestroy(graph));
  SAMPLE_CHECK(cudaDeviceGraphMemTrim(0));
  SAMPLE_CHECK(cudaStreamDestroy(stream));
  account.print();
  return 0;
}
