// What the simulated driver's handles point to, and what its files share: driver_api.cpp (the
// calls), graph_memory.cpp (CUDA graphs' memory nodes), sharing.cpp (memory shared between
// processes).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "device_model.h"

struct CUctx_st {
  int device;
  bool primary;
};
struct CUgraphNode_st {
  CUgraphNodeType type;
  // An allocation node's parameters, as cuGraphMemAllocNodeGetParams gives them: "owned by the node"
  // (cuda.h 13.0), its access descriptors a copy of the caller's.
  CUDA_MEM_ALLOC_NODE_PARAMS alloc{};
  std::vector<CUmemAccessDesc> access;
};
// A graph's allocations: their addresses (address space only until a launch) and whether the
// graph frees them itself.
struct CUgraph_st {
  struct Allocation {
    uint64_t addr;
    uint64_t size;  // as asked for
    uint64_t span;  // the address space it takes
    int device;
    bool freed = false;
  };
  std::vector<Allocation> allocations;
  std::vector<std::unique_ptr<CUgraphNode_st>> nodes;
};
struct CUgraphExec_st {
  std::vector<std::pair<int, uint64_t>> bytes_per_device;  // what a launch needs
};
struct CUstream_st {
  int device;
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  CUgraph capture_graph = nullptr;  // the graph the capture builds
};
struct CUmemPoolHandle_st {
  int device;
};

namespace sim_driver {

bool initialized();
CUresult to_result(sim::Status status);
// The device of the current context.
CUresult context_device(int* device);
// The graph STREAM is being captured into (the per-thread default stream when PER_THREAD and
// STREAM is 0), or null when it is not capturing.
CUgraph capture_graph(CUstream stream, bool per_thread);

// Graph memory nodes (graph_memory.cpp): the allocation node's address in *ADDR, and its free
// (the size it frees in *SIZE). NODE may be null.
CUresult add_alloc_node(CUgraph graph, const CUDA_MEM_ALLOC_NODE_PARAMS& params, CUdeviceptr* addr, CUgraphNode* node);
// The parameters of an allocation node on DEVICE's memory (what a captured stream-ordered
// allocation adds).
CUDA_MEM_ALLOC_NODE_PARAMS device_pool_params(int device, size_t size);
CUresult add_free_node(CUgraph graph, CUdeviceptr addr, CUgraphNode* node, uint64_t* size);

}  // namespace sim_driver
