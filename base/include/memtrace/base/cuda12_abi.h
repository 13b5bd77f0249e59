// What CUDA 12 runtimes declared that CUDA 13.0's headers (the toolkit here) no longer do. CUDA 12.2
// added cudaGraphAddNode without edge data; 12.3 added the form with them as cudaGraphAddNode_v2;
// CUDA 13.0 kept only that form, under the plain name. So a program or library built against a
// CUDA 12 runtime calls cudaGraphAddNode with five arguments (cuda_runtime_api.h 12.2-12.9), and its
// CUPTI callback is CUPTI_RUNTIME_TRACE_CBID_cudaGraphAddNode_v12020 with these parameters
// (generated_cuda_runtime_api_meta.h 12.2).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace memtrace::cuda12 {

using GraphAddNode = cudaError_t (*)(cudaGraphNode_t* pGraphNode, cudaGraph_t graph,
                                     const cudaGraphNode_t* pDependencies, size_t numDependencies,
                                     cudaGraphNodeParams* nodeParams);

struct cudaGraphAddNode_v12020_params {
  cudaGraphNode_t* pGraphNode;
  cudaGraph_t graph;
  const cudaGraphNode_t* pDependencies;
  size_t numDependencies;
  cudaGraphNodeParams* nodeParams;
};

// The first runtime whose cudaGraphAddNode takes edge data.
inline constexpr int kGraphAddNodeWithEdgesRuntime = 13000;

}  // namespace memtrace::cuda12
