// Interposers for CUDA graphs' memory nodes. Adding an allocation node fixes the address the
// allocation has at every launch of the graph; the memory itself is the graph's, held from a
// launch until it is freed (by a free node, or a free call after the launch). memtrace records
// the node as graph memory, with its stack; what graphs hold on the device is sampled with the
// device layer (device.graph_reserved).
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstddef>

#include "interpose.h"
#include "memtrace/base/cuda12_abi.h"

// cuda.h names the CUDA 12.3 entry point cuGraphAddNode; the CUDA 12.2 one, without edge data, is
// still the driver's, handed to callers of 12020 to 12029 (cudaTypedefs.h: PFN_cuGraphAddNode_v12020).
#undef cuGraphAddNode
extern "C" CUresult cuGraphAddNode(CUgraphNode*, CUgraph, const CUgraphNode*, size_t, CUgraphNodeParams*);

using namespace memtrace;
using namespace memtrace::inject;

namespace {

RealFunction<decltype(&cudaGraphAddMemAllocNode)> real_cudaGraphAddMemAllocNode("cudaGraphAddMemAllocNode",
                                                                                Library::kRuntime);
RealFunction<decltype(&cudaGraphAddMemFreeNode)> real_cudaGraphAddMemFreeNode("cudaGraphAddMemFreeNode",
                                                                              Library::kRuntime);
RealFunction<decltype(&cuGraphAddMemAllocNode)> real_cuGraphAddMemAllocNode("cuGraphAddMemAllocNode", Library::kDriver);
RealFunction<decltype(&cuGraphAddMemFreeNode)> real_cuGraphAddMemFreeNode("cuGraphAddMemFreeNode", Library::kDriver);
RealFunction<decltype(&cudaGraphAddNode)> real_cudaGraphAddNode("cudaGraphAddNode", Library::kRuntime);
RealFunction<cuda12::GraphAddNode> real_cudaGraphAddNode_cuda12("cudaGraphAddNode", Library::kRuntime);
RealFunction<decltype(&cudaGraphAddNode)> real_cudaGraphAddNode_v2("cudaGraphAddNode_v2", Library::kRuntime);
RealFunction<decltype(&cuGraphAddNode_v2)> real_cuGraphAddNode_v2("cuGraphAddNode_v2", Library::kDriver);
RealFunction<decltype(&cuGraphAddNode)> real_cuGraphAddNode("cuGraphAddNode", Library::kDriver);

// The runtime's node parameters have the driver's layout and type values.
static_assert(offsetof(cudaGraphNodeParams, alloc) == offsetof(CUgraphNodeParams, alloc) &&
              offsetof(cudaGraphNodeParams, free) == offsetof(CUgraphNodeParams, free) &&
              static_cast<int>(cudaGraphNodeTypeMemAlloc) == CU_GRAPH_NODE_TYPE_MEM_ALLOC &&
              static_cast<int>(cudaGraphNodeTypeMemFree) == CU_GRAPH_NODE_TYPE_MEM_FREE &&
              CU_GRAPH_NODE_TYPE_MEM_ALLOC == 10 && CU_GRAPH_NODE_TYPE_MEM_FREE == 11);  // graph_node_api's

// A node through the generic node API (cudaGraphAddNode, cuGraphAddNode and its _v2): an
// allocation node is recorded as ALLOC_API once it has its address, a free node as FREE_API; a node
// of any other type holds no memory and passes through.
template <auto kMissing, typename Fn, typename Params, typename... Args>
auto add_node(Api alloc_api, Api free_api, uint64_t caller, RealFunction<Fn>& real, const void* graph, Params* params,
              Args... args) {
  const Api api = graph_node_api(params, alloc_api, free_api);
  if (api == free_api)
    return free_call<kMissing>(free_api, caller, real, as_address(params->free.dptr), 0, nullptr, Ordering::kImmediate,
                               args...);
  if (api != alloc_api) return call_real<kMissing>(real, caller, args...);
  Call call(alloc_api, caller);
  auto result = call_real<kMissing>(call, real, args...);
  return record_graph_node(call, result, as_address(params->alloc.dptr), params->alloc.bytesize, graph,
                           location_device(params->alloc.poolProps.location));
}

}  // namespace

MEMTRACE_EXPORT cudaError_t cudaGraphAddMemAllocNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                                     const cudaGraphNode_t* pDependencies, size_t numDependencies,
                                                     cudaMemAllocNodeParams* nodeParams) {
  Call call(Api::kCudaGraphAddMemAllocNode, MEMTRACE_CALLER);
  cudaError_t result = call_real<cudaErrorInitializationError>(call, real_cudaGraphAddMemAllocNode, pGraphNode, graph,
                                                               pDependencies, numDependencies, nodeParams);
  if (!nodeParams) return record_after(call, result, 0, 0, no_device);
  return record_graph_node(call, result, reinterpret_cast<uint64_t>(nodeParams->dptr), nodeParams->bytesize, graph,
                           location_device(nodeParams->poolProps.location));
}

MEMTRACE_EXPORT cudaError_t cudaGraphAddMemFreeNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                                    const cudaGraphNode_t* pDependencies, size_t numDependencies,
                                                    void* dptr) {
  return free_call<cudaErrorInitializationError>(
      Api::kCudaGraphAddMemFreeNode, MEMTRACE_CALLER, real_cudaGraphAddMemFreeNode, reinterpret_cast<uint64_t>(dptr), 0,
      nullptr, Ordering::kImmediate, pGraphNode, graph, pDependencies, numDependencies, dptr);
}

MEMTRACE_EXPORT CUresult cuGraphAddMemAllocNode(CUgraphNode* phGraphNode, CUgraph hGraph,
                                                const CUgraphNode* dependencies, size_t numDependencies,
                                                CUDA_MEM_ALLOC_NODE_PARAMS* nodeParams) {
  Call call(Api::kCuGraphAddMemAllocNode, MEMTRACE_CALLER);
  CUresult result = call_real<CUDA_ERROR_NOT_INITIALIZED>(call, real_cuGraphAddMemAllocNode, phGraphNode, hGraph,
                                                          dependencies, numDependencies, nodeParams);
  if (!nodeParams) return record_after(call, result, 0, 0, no_device);
  return record_graph_node(call, result, nodeParams->dptr, nodeParams->bytesize, hGraph,
                           location_device(nodeParams->poolProps.location));
}

MEMTRACE_EXPORT CUresult cuGraphAddMemFreeNode(CUgraphNode* phGraphNode, CUgraph hGraph,
                                               const CUgraphNode* dependencies, size_t numDependencies,
                                               CUdeviceptr dptr) {
  return free_call<CUDA_ERROR_NOT_INITIALIZED>(Api::kCuGraphAddMemFreeNode, MEMTRACE_CALLER, real_cuGraphAddMemFreeNode,
                                               dptr, 0, nullptr, Ordering::kImmediate, phGraphNode, hGraph,
                                               dependencies, numDependencies, dptr);
}

// Its ABI is the serving runtime's: a CUDA 12 runtime's takes no edge data (memtrace/base/
// cuda12_abi.h), and its caller passed five arguments, the fourth numDependencies and the fifth
// nodeParams, which this function, taking six, finds in dependencyData and numDependencies.
MEMTRACE_EXPORT cudaError_t cudaGraphAddNode(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                             const cudaGraphNode_t* pDependencies,
                                             const cudaGraphEdgeData* dependencyData, size_t numDependencies,
                                             cudaGraphNodeParams* nodeParams) {
  const uint64_t caller = MEMTRACE_CALLER;
  const int version = runtime_version_of(reinterpret_cast<const void*>(real_cudaGraphAddNode.get(caller)));
  if (version >= 0 && version < cuda12::kGraphAddNodeWithEdgesRuntime) {
    const auto count = reinterpret_cast<size_t>(dependencyData);
    auto* params = reinterpret_cast<cudaGraphNodeParams*>(numDependencies);
    return add_node<cudaErrorInitializationError>(Api::kCudaGraphAddNodeMemAlloc, Api::kCudaGraphAddNodeMemFree, caller,
                                                  real_cudaGraphAddNode_cuda12, graph, params, pGraphNode, graph,
                                                  pDependencies, count, params);
  }
  return add_node<cudaErrorInitializationError>(Api::kCudaGraphAddNodeMemAlloc, Api::kCudaGraphAddNodeMemFree, caller,
                                                real_cudaGraphAddNode, graph, nodeParams, pGraphNode, graph,
                                                pDependencies, dependencyData, numDependencies, nodeParams);
}

// CUDA 12.3 to 12.9's form with edge data.
MEMTRACE_EXPORT cudaError_t cudaGraphAddNode_v2(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                                const cudaGraphNode_t* pDependencies,
                                                const cudaGraphEdgeData* dependencyData, size_t numDependencies,
                                                cudaGraphNodeParams* nodeParams) {
  return add_node<cudaErrorInitializationError>(
      Api::kCudaGraphAddNodeMemAlloc, Api::kCudaGraphAddNodeMemFree, MEMTRACE_CALLER, real_cudaGraphAddNode_v2, graph,
      nodeParams, pGraphNode, graph, pDependencies, dependencyData, numDependencies, nodeParams);
}

MEMTRACE_EXPORT CUresult cuGraphAddNode_v2(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                           const CUgraphEdgeData* dependencyData, size_t numDependencies,
                                           CUgraphNodeParams* nodeParams) {
  return add_node<CUDA_ERROR_NOT_INITIALIZED>(Api::kCuGraphAddNodeMemAlloc, Api::kCuGraphAddNodeMemFree,
                                              MEMTRACE_CALLER, real_cuGraphAddNode_v2, hGraph, nodeParams, phGraphNode,
                                              hGraph, dependencies, dependencyData, numDependencies, nodeParams);
}

MEMTRACE_EXPORT CUresult cuGraphAddNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                        size_t numDependencies, CUgraphNodeParams* nodeParams) {
  return add_node<CUDA_ERROR_NOT_INITIALIZED>(Api::kCuGraphAddNodeMemAlloc, Api::kCuGraphAddNodeMemFree,
                                              MEMTRACE_CALLER, real_cuGraphAddNode, hGraph, nodeParams, phGraphNode,
                                              hGraph, dependencies, numDependencies, nodeParams);
}
