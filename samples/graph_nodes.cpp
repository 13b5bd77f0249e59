// CUDA graphs' memory made through the generic node API (CUDA 12.2), as CUDA 13 programs make it:
// a 6 MiB allocation node from the runtime's cudaGraphAddNode (which NVIDIA's runtime sends to the
// driver's cuGraphAddNode_v2), 2 MiB from the driver's cuGraphAddNode_v2 and 1 MiB from CUDA
// 12.2's cuGraphAddNode (no edge data), both taken from cudaGetDriverEntryPointByVersion at their
// versions (12030, 12020); each freed by a free node made the same way. An empty node through
// the generic API holds no memory, and memory nodes' parameters cannot be changed
// (cudaGraphNodeSetParams: cudaErrorNotSupported). The graph is launched twice.
//
// Before that, three CUDA calls in an order --first chooses: cudaGetDeviceCount, a 1 MiB cudaMalloc
// and its cudaFree, and the driver's cuInit; with --first thread the cudaMalloc comes first, made
// on another thread. The trace must not depend on the order.
//   graph_nodes [--first device-count|malloc|cu-init|thread]
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstring>
#include <string>
#include <thread>

#include "driver_entry.h"
#include "sample_account.h"

#undef cuGraphAddNode
using AddNodeV2 = CUresult (*)(CUgraphNode*, CUgraph, const CUgraphNode*, const CUgraphEdgeData*, size_t,
                               CUgraphNodeParams*);
using AddNode = CUresult (*)(CUgraphNode*, CUgraph, const CUgraphNode*, size_t, CUgraphNodeParams*);

namespace {

sample::Account account;
constexpr size_t kMiB = 1 << 20;

template <typename Result>
void check(const char* api, Result r) {
  account.call(api, r == 0);
  SAMPLE_CHECK(r);
}

void device_count() {
  int count = 0;
  SAMPLE_CHECK(cudaGetDeviceCount(&count));
}

void malloc_and_free() {
  void* p = nullptr;
  check("cudaMalloc", cudaMalloc(&p, kMiB));
  account.live(0, static_cast<int64_t>(kMiB));
  check("cudaFree", cudaFree(p));
  account.live(0, -static_cast<int64_t>(kMiB));
}

void cu_init() { SAMPLE_CHECK(cuInit(0)); }

template <typename NodeParams>
NodeParams alloc_params(size_t bytes) {
  NodeParams params{};
  params.type = static_cast<decltype(params.type)>(CU_GRAPH_NODE_TYPE_MEM_ALLOC);
  params.alloc.poolProps.allocType = static_cast<decltype(params.alloc.poolProps.allocType)>(1);          // pinned
  params.alloc.poolProps.location.type = static_cast<decltype(params.alloc.poolProps.location.type)>(1);  // device
  params.alloc.poolProps.location.id = 0;
  params.alloc.bytesize = bytes;
  return params;
}

template <typename NodeParams, typename Address>
NodeParams free_params(Address dptr) {
  NodeParams params{};
  params.type = static_cast<decltype(params.type)>(CU_GRAPH_NODE_TYPE_MEM_FREE);
  params.free.dptr = dptr;
  return params;
}

cudaGraph_t build_graph() {
  cudaGraph_t graph;
  SAMPLE_CHECK(cudaGraphCreate(&graph, 0));
  auto g = reinterpret_cast<CUgraph>(graph);

  // The runtime's generic API.
  cudaGraphNodeParams a = alloc_params<cudaGraphNodeParams>(6 * kMiB);
  cudaGraphNode_t alloc_a;
  check("cudaGraphAddNode.mem_alloc", cudaGraphAddNode(&alloc_a, graph, nullptr, nullptr, 0, &a));
  SAMPLE_CHECK(a.alloc.dptr == nullptr);  // the call gives the node its address
  // Memory nodes' parameters cannot be changed (cuda_runtime_api.h 13.0, cudaGraphNodeSetParams).
  SAMPLE_CHECK(cudaGraphNodeSetParams(alloc_a, &a) == cudaSuccess);
  cudaGraphNodeParams empty{};
  empty.type = cudaGraphNodeTypeEmpty;
  cudaGraphNode_t nothing;
  SAMPLE_CHECK(cudaGraphAddNode(&nothing, graph, &alloc_a, nullptr, 1, &empty));

  // The driver's, at CUDA 12.3's ABI and at CUDA 12.2's.
  static const auto add_v2 = sample::driver_entry<AddNodeV2>("cuGraphAddNode", 12030);
  static const auto add_v1 = sample::driver_entry<AddNode>("cuGraphAddNode", 12020);
  CUgraphNodeParams b = alloc_params<CUgraphNodeParams>(2 * kMiB);
  CUgraphNode alloc_b, free_b;
  auto after_empty = reinterpret_cast<CUgraphNode>(nothing);  // each free is ordered after its allocation
  check("cuGraphAddNode.mem_alloc", add_v2(&alloc_b, g, &after_empty, nullptr, 1, &b));
  CUgraphNodeParams c = alloc_params<CUgraphNodeParams>(kMiB);
  CUgraphNode alloc_c, free_c;
  check("cuGraphAddNode.mem_alloc", add_v1(&alloc_c, g, &alloc_b, 1, &c));
  CUgraphNodeParams free_of_b = free_params<CUgraphNodeParams>(b.alloc.dptr);
  check("cuGraphAddNode.mem_free", add_v2(&free_b, g, &alloc_c, nullptr, 1, &free_of_b));
  CUgraphNodeParams free_of_c = free_params<CUgraphNodeParams>(c.alloc.dptr);
  check("cuGraphAddNode.mem_free", add_v1(&free_c, g, &free_b, 1, &free_of_c));

  cudaGraphNodeParams free_of_a = free_params<cudaGraphNodeParams>(a.alloc.dptr);
  cudaGraphNode_t free_a;
  auto after = reinterpret_cast<cudaGraphNode_t>(free_c);
  check("cudaGraphAddNode.mem_free", cudaGraphAddNode(&free_a, graph, &after, nullptr, 1, &free_of_a));
  return graph;
}

}  // namespace

int main(int argc, char** argv) {
  std::string first = "device-count";
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--first") == 0) first = argv[i + 1];
  if (first == "malloc") {
    malloc_and_free();
    device_count();
    cu_init();
  } else if (first == "cu-init") {
    cu_init();
    device_count();
    malloc_and_free();
  } else if (first == "thread") {
    std::thread(malloc_and_free).join();
    device_count();
    cu_init();
  } else {
    device_count();
    malloc_and_free();
    cu_init();
  }

  cudaStream_t stream;
  SAMPLE_CHECK(cudaStreamCreate(&stream));
  cudaGraph_t graph = build_graph();
  cudaGraphExec_t exec;
  SAMPLE_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int launch = 0; launch < 2; ++launch) SAMPLE_CHECK(cudaGraphLaunch(exec, stream));
  SAMPLE_CHECK(cudaStreamSynchronize(stream));
  SAMPLE_CHECK(cudaGraphExecDestroy(exec));
  SAMPLE_CHECK(cudaGraphDestroy(graph));
  SAMPLE_CHECK(cudaDeviceGraphMemTrim(0));
  SAMPLE_CHECK(cudaStreamDestroy(stream));
  account.print();
  return 0;
}
