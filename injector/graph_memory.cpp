// Interposers for CUDA graphs' memory nodes. Adding an allocation node fixes the address the
// allocation has at every launch of the graph; the memory itself is the graph's, held from a
// launch until it is freed (by a free node, or a free call after the launch). memtrace records
// the node as graph memory, with its stack; what graphs hold on the device is sampled with the
// device layer (device.graph_reserved).
#include <cuda.h>
#include <cuda_runtime_api.h>

#include "interpose.h"

using namespace memtrace;
using namespace memtrace::inject;

namespace {

RealFunction<decltype(&cudaGraphAddMemAllocNode)> real_cudaGraphAddMemAllocNode("cudaGraphAddMemAllocNode",
                                                                                Library::kRuntime);
RealFunction<decltype(&cudaGraphAddMemFreeNode)> real_cudaGraphAddMemFreeNode("cudaGraphAddMemFreeNode",
                                                                              Library::kRuntime);
RealFunction<decltype(&cuGraphAddMemAllocNode)> real_cuGraphAddMemAllocNode("cuGraphAddMemAllocNode", Library::kDriver);
RealFunction<decltype(&cuGraphAddMemFreeNode)> real_cuGraphAddMemFreeNode("cuGraphAddMemFreeNode", Library::kDriver);

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
