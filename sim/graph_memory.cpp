// CUDA graphs' memory on the simulated device. As on a GPU, adding an allocation node (through
// cuGraphAddMemAllocNode, or a stream-ordered allocation captured into a graph) fixes the address
// the allocation has at every launch: address space only. A launch reserves what the graph needs
// on its device, and that stays reserved (in use on the device, in no allocation of the
// program's) until cuDeviceGraphMemTrim. One simplification: a graph must free what it allocates
// (a free node); one whose allocation would outlive its launch is refused at instantiation.
#include <cuda.h>
#include <cupti.h>
#include <pthread.h>

#include <cstring>
#include <map>
#include <mutex>

#include "api_callbacks.h"
#include "driver_objects.h"
#include "ledger.h"

#undef cuGraphAddNode
extern "C" CUresult cuGraphAddNode(CUgraphNode*, CUgraph, const CUgraphNode*, size_t, CUgraphNodeParams*);

namespace {

constexpr int kDriverApi = CUPTI_CB_DOMAIN_DRIVER_API;

std::mutex g_graphs_mutex;                           // graphs' allocation lists, and:
std::map<uint64_t, uint64_t> g_unfreed_allocations;  // address -> size, of every graph

// A forked child has a fresh device (device_model.cpp; with a real driver CUDA before exec in a
// forked child is undefined: NVIDIA's CUDA C++ Guidelines 3.0.1, CUDA-1.6): no graph memory of its
// parent's, and the lock free (a parent thread may have held it at the fork).
void reset_graphs_after_fork() {
  new (&g_graphs_mutex) std::mutex;
  g_unfreed_allocations.clear();
}
__attribute__((constructor)) void install_graphs_fork_handler() {
  ::pthread_atfork(nullptr, nullptr, reset_graphs_after_fork);
}

uint64_t span_of(uint64_t size) {
  return (size + sim::kVmmGranularity - 1) / sim::kVmmGranularity * sim::kVmmGranularity;
}

CUgraphNode new_node(CUgraph graph, CUgraphNodeType type) {
  graph->nodes.push_back(std::make_unique<CUgraphNode_st>());
  graph->nodes.back()->type = type;
  return graph->nodes.back().get();
}

// What an allocation node's parameters must say: pinned device memory (as CUDA's graph memory is).
bool valid_alloc_params(const CUDA_MEM_ALLOC_NODE_PARAMS& params) {
  return params.poolProps.allocType == CU_MEM_ALLOCATION_TYPE_PINNED &&
         params.poolProps.location.type == CU_MEM_LOCATION_TYPE_DEVICE;
}

bool is_memory_node(CUgraphNodeType type) {
  return type == CU_GRAPH_NODE_TYPE_MEM_ALLOC || type == CU_GRAPH_NODE_TYPE_MEM_FREE;
}

}  // namespace

namespace sim_driver {

CUDA_MEM_ALLOC_NODE_PARAMS device_pool_params(int device, size_t size) {
  CUDA_MEM_ALLOC_NODE_PARAMS params{};
  params.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  params.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  params.poolProps.location.id = device;
  params.bytesize = size;
  return params;
}

CUresult add_alloc_node(CUgraph graph, const CUDA_MEM_ALLOC_NODE_PARAMS& params, CUdeviceptr* addr, CUgraphNode* node) {
  const int device = params.poolProps.location.id;
  const size_t size = params.bytesize;
  if (!graph || !addr || size == 0 || !valid_alloc_params(params)) return CUDA_ERROR_INVALID_VALUE;
  if (!sim::valid_device(device)) return CUDA_ERROR_INVALID_DEVICE;
  uint64_t at = 0;
  const uint64_t span = span_of(size);
  CUresult r = to_result(sim::vmm_reserve(span, 0, &at));
  if (r != CUDA_SUCCESS) return r;
  std::lock_guard lock(g_graphs_mutex);
  graph->allocations.push_back(CUgraph_st::Allocation{at, size, span, device});
  g_unfreed_allocations[at] = size;
  *addr = at;
  if (node) {
    *node = new_node(graph, CU_GRAPH_NODE_TYPE_MEM_ALLOC);
    CUgraphNode_st& n = **node;
    n.alloc = params;
    n.alloc.dptr = at;
    if (params.accessDescs) n.access.assign(params.accessDescs, params.accessDescs + params.accessDescCount);
    n.alloc.accessDescs = n.access.empty() ? nullptr : n.access.data();
    n.alloc.accessDescCount = n.access.size();
  }
  return CUDA_SUCCESS;
}

CUresult add_free_node(CUgraph graph, CUdeviceptr addr, CUgraphNode* node, uint64_t* size) {
  *size = 0;
  if (!graph) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(g_graphs_mutex);
  for (CUgraph_st::Allocation& a : graph->allocations) {
    if (a.addr != addr || a.freed) continue;
    a.freed = true;
    *size = a.size;
    g_unfreed_allocations.erase(a.addr);
    if (node) *node = new_node(graph, CU_GRAPH_NODE_TYPE_MEM_FREE);
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;  // not an allocation of this graph's, or freed already
}

}  // namespace sim_driver

uint64_t sim::graph_allocation_size(uint64_t addr) {
  std::lock_guard lock(g_graphs_mutex);
  auto it = g_unfreed_allocations.find(addr);
  return it == g_unfreed_allocations.end() ? 0 : it->second;
}

namespace {

// A node of PARAMS's type through the generic node API (the ledger keeps the names it is given).
CUresult add_node(CUgraphNode* node, CUgraph graph, CUgraphNodeParams* params) {
  if (!node || !params) return CUDA_ERROR_INVALID_VALUE;
  switch (params->type) {
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC: {
      sim::ApiCall call("cuGraphAddNode.mem_alloc");
      if (!sim_driver::initialized()) return call.done(CUDA_ERROR_NOT_INITIALIZED);
      static_assert(sizeof(CUDA_MEM_ALLOC_NODE_PARAMS_v2) == sizeof(CUDA_MEM_ALLOC_NODE_PARAMS));
      CUDA_MEM_ALLOC_NODE_PARAMS alloc;
      std::memcpy(&alloc, &params->alloc, sizeof alloc);
      const CUresult r = sim_driver::add_alloc_node(graph, alloc, &params->alloc.dptr, node);
      return call.done(r, params->alloc.bytesize);
    }
    case CU_GRAPH_NODE_TYPE_MEM_FREE: {
      sim::ApiCall call("cuGraphAddNode.mem_free");
      if (!sim_driver::initialized()) return call.done(CUDA_ERROR_NOT_INITIALIZED);
      uint64_t size = 0;
      const CUresult r = sim_driver::add_free_node(graph, params->free.dptr, node, &size);
      return call.done(r, size);
    }
    default:
      if (!graph) return CUDA_ERROR_INVALID_VALUE;
      std::lock_guard lock(g_graphs_mutex);
      *node = new_node(graph, params->type);
      return CUDA_SUCCESS;
  }
}

}  // namespace

extern "C" {

CUresult cuGraphCreate(CUgraph* graph, unsigned int flags) {
  if (!graph || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  *graph = new CUgraph_st;
  return CUDA_SUCCESS;
}

CUresult cuGraphDestroy(CUgraph graph) {
  if (!graph) return CUDA_ERROR_INVALID_VALUE;
  {
    std::lock_guard lock(g_graphs_mutex);
    for (const CUgraph_st::Allocation& a : graph->allocations) g_unfreed_allocations.erase(a.addr);
  }
  for (const CUgraph_st::Allocation& a : graph->allocations) sim::vmm_free_reservation(a.addr, a.span);
  delete graph;
  return CUDA_SUCCESS;
}

CUresult cuGraphAddMemAllocNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* dependencies,
                                size_t numDependencies, CUDA_MEM_ALLOC_NODE_PARAMS* params) {
  return sim::traced(kDriverApi, CUPTI_DRIVER_TRACE_CBID_cuGraphAddMemAllocNode, "cuGraphAddMemAllocNode",
                     cuGraphAddMemAllocNode_params{node, graph, dependencies, numDependencies, params}, [&] {
                       sim::ApiCall call("cuGraphAddMemAllocNode");
                       if (!sim_driver::initialized()) return call.done(CUDA_ERROR_NOT_INITIALIZED);
                       if (!node || !params) return call.done(CUDA_ERROR_INVALID_VALUE);
                       CUresult r = sim_driver::add_alloc_node(graph, *params, &params->dptr, node);
                       return call.done(r, params->bytesize);
                     });
}

CUresult cuGraphAddMemFreeNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* dependencies,
                               size_t numDependencies, CUdeviceptr dptr) {
  return sim::traced(kDriverApi, CUPTI_DRIVER_TRACE_CBID_cuGraphAddMemFreeNode, "cuGraphAddMemFreeNode",
                     cuGraphAddMemFreeNode_params{node, graph, dependencies, numDependencies, dptr}, [&] {
                       sim::ApiCall call("cuGraphAddMemFreeNode");
                       if (!sim_driver::initialized()) return call.done(CUDA_ERROR_NOT_INITIALIZED);
                       if (!node) return call.done(CUDA_ERROR_INVALID_VALUE);
                       uint64_t size = 0;
                       CUresult r = sim_driver::add_free_node(graph, dptr, node, &size);
                       return call.done(r, size);
                     });
}

// The generic node API (CUDA 12.2): a node of any type, memory nodes among them, each ledgered
// under the call and the node's type (cuGraphAddNode.mem_alloc). Other types hold no memory here.
CUresult cuGraphAddNode_v2(CUgraphNode* node, CUgraph graph, const CUgraphNode* dependencies,
                           const CUgraphEdgeData* dependencyData, size_t numDependencies, CUgraphNodeParams* params) {
  return sim::traced(kDriverApi, CUPTI_DRIVER_TRACE_CBID_cuGraphAddNode_v2, "cuGraphAddNode_v2",
                     cuGraphAddNode_v2_params{node, graph, dependencies, dependencyData, numDependencies, params},
                     [&] { return add_node(node, graph, params); });
}

// Its CUDA 12.2 ABI, without edge data (cuGetProcAddress hands it to callers of 12020 to 12029).
CUresult cuGraphAddNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* dependencies, size_t numDependencies,
                        CUgraphNodeParams* params) {
  return sim::traced(kDriverApi, CUPTI_DRIVER_TRACE_CBID_cuGraphAddNode, "cuGraphAddNode",
                     cuGraphAddNode_params{node, graph, dependencies, numDependencies, params},
                     [&] { return add_node(node, graph, params); });
}

// "Modifying parameters is not supported for node types CU_GRAPH_NODE_TYPE_MEM_ALLOC and
// CU_GRAPH_NODE_TYPE_MEM_FREE" (cuda.h 13.0, cuGraphNodeSetParams); the others change nothing here.
CUresult cuGraphNodeSetParams(CUgraphNode node, CUgraphNodeParams* params) {
  if (!node || !params || params->type != node->type) return CUDA_ERROR_INVALID_VALUE;
  return is_memory_node(node->type) ? CUDA_ERROR_NOT_SUPPORTED : CUDA_SUCCESS;
}

// Memory allocation and free nodes: "API unsupported" (cuda.h 13.0, cuGraphExecNodeSetParams).
CUresult cuGraphExecNodeSetParams(CUgraphExec exec, CUgraphNode node, CUgraphNodeParams* params) {
  if (!exec || !node || !params || params->type != node->type) return CUDA_ERROR_INVALID_VALUE;
  return is_memory_node(node->type) ? CUDA_ERROR_NOT_SUPPORTED : CUDA_SUCCESS;
}

CUresult cuGraphMemAllocNodeGetParams(CUgraphNode node, CUDA_MEM_ALLOC_NODE_PARAMS* params) {
  if (!node || !params || node->type != CU_GRAPH_NODE_TYPE_MEM_ALLOC) return CUDA_ERROR_INVALID_VALUE;
  *params = node->alloc;
  return CUDA_SUCCESS;
}

CUresult cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph, unsigned long long) {
  if (!exec || !graph) return CUDA_ERROR_INVALID_VALUE;
  std::map<int, uint64_t> bytes;
  {
    std::lock_guard lock(g_graphs_mutex);
    for (const CUgraph_st::Allocation& a : graph->allocations) {
      if (!a.freed) return CUDA_ERROR_NOT_SUPPORTED;  // the simplification above
      bytes[a.device] += a.span;
    }
  }
  *exec = new CUgraphExec_st{{bytes.begin(), bytes.end()}};
  return CUDA_SUCCESS;
}

// The graph's memory is reserved at its launch and kept: later launches reuse it.
CUresult cuGraphLaunch(CUgraphExec exec, CUstream) {
  if (!exec) return CUDA_ERROR_INVALID_VALUE;
  for (const auto& [device, bytes] : exec->bytes_per_device) {
    CUresult r = sim_driver::to_result(sim::reserve_graph_memory(device, bytes));
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

CUresult cuGraphExecDestroy(CUgraphExec exec) {
  if (!exec) return CUDA_ERROR_INVALID_VALUE;
  delete exec;
  return CUDA_SUCCESS;
}

// Every launch here has finished and freed its allocations: graphs use none of what they keep.
CUresult cuDeviceGetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void* value) {
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  if (!sim::valid_device(device)) return CUDA_ERROR_INVALID_DEVICE;
  switch (attr) {
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT:
      *static_cast<cuuint64_t*>(value) = sim::graph_memory(device);
      return CUDA_SUCCESS;
    case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT: *static_cast<cuuint64_t*>(value) = 0; return CUDA_SUCCESS;
    default: return CUDA_ERROR_NOT_SUPPORTED;
  }
}

CUresult cuDeviceGraphMemTrim(CUdevice device) {
  if (!sim::valid_device(device)) return CUDA_ERROR_INVALID_DEVICE;
  sim::trim_graph_memory(device);
  return CUDA_SUCCESS;
}

}  // extern "C"
