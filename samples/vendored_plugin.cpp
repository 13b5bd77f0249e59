// A plugin as auditwheel ships them: linked against its own renamed copy of the CUDA runtime
// (libcudart-3f2a9c1e.so.12 beside it, found through RPATH $ORIGIN), and loaded RTLD_LOCAL by its
// host, so its runtime is in no global lookup scope. Its calls must reach that copy.
//
// Its calls check their results, as real extensions do: memtrace tells which copy a call belongs
// to by its return address, which a tail call (`return cudaMalloc(...)`) would hand to the
// plugin's own caller.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdio>

#include "memtrace/base/cuda12_abi.h"

namespace {
int checked(cudaError_t e, const char* what) {
  if (e != cudaSuccess) std::fprintf(stderr, "plugin: %s failed with %d\n", what, static_cast<int>(e));
  return e;
}
}  // namespace

extern "C" {

int plugin_set_device(int device) { return cudaSetDevice(device); }

int plugin_malloc(void** p, size_t bytes) {
  return checked(cudaMalloc(p, bytes), "cudaMalloc");  // memtrace-test: vendored-malloc
}

int plugin_free(void* p) { return checked(cudaFree(p), "cudaFree"); }

int plugin_last_error() { return cudaGetLastError(); }

// Driver functions as its runtime hands them out (cudaGetDriverEntryPoint asks the driver at the
// runtime's own version, CUDA 12.2's): cuGraphAddNode of 12.2's ABI, without edge data, for a
// 1 MiB allocation node and its free node; cuGetProcAddress, and from it cuMemAlloc and cuMemFree
// for 1 MiB. And its runtime's own cudaGraphAddNode, CUDA 12.2's, as a plugin built against 12.2's
// headers calls it (five arguments: memtrace/base/cuda12_abi.h), for a 512 KiB node and its free.
// 0 when every call worked.
int plugin_driver_entry_points() {
  using AddNode = CUresult (*)(CUgraphNode*, CUgraph, const CUgraphNode*, size_t, CUgraphNodeParams*);
  using GetProcAddress = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  void *add_node = nullptr, *get_proc = nullptr;
  cudaDriverEntryPointQueryResult found;
  int device = 0;
  if (checked(cudaGetDevice(&device), "cudaGetDevice") ||
      checked(cudaGetDriverEntryPoint("cuGraphAddNode", &add_node, cudaEnableDefault, &found), "entry point") ||
      checked(cudaGetDriverEntryPoint("cuGetProcAddress", &get_proc, cudaEnableDefault, &found), "entry point"))
    return 1;
  cudaGraph_t graph;
  if (checked(cudaGraphCreate(&graph, 0), "cudaGraphCreate")) return 1;
  CUgraphNodeParams alloc{};
  alloc.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
  alloc.alloc.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  alloc.alloc.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  alloc.alloc.poolProps.location.id = device;
  alloc.alloc.bytesize = 1 << 20;
  CUgraphNode allocated, freed;
  auto g = reinterpret_cast<CUgraph>(graph);
  if (reinterpret_cast<AddNode>(add_node)(&allocated, g, nullptr, 0, &alloc) != CUDA_SUCCESS) return 1;
  CUgraphNodeParams free_node{};
  free_node.type = CU_GRAPH_NODE_TYPE_MEM_FREE;
  free_node.free.dptr = alloc.alloc.dptr;
  if (reinterpret_cast<AddNode>(add_node)(&freed, g, &allocated, 1, &free_node) != CUDA_SUCCESS) return 1;
  const auto runtime_add_node = reinterpret_cast<memtrace::cuda12::GraphAddNode>(&cudaGraphAddNode);
  cudaGraphNodeParams small{};
  small.type = cudaGraphNodeTypeMemAlloc;
  small.alloc.poolProps.allocType = cudaMemAllocationTypePinned;
  small.alloc.poolProps.location.type = cudaMemLocationTypeDevice;
  small.alloc.poolProps.location.id = device;
  small.alloc.bytesize = 512 << 10;
  cudaGraphNode_t small_node, small_free;
  if (checked(runtime_add_node(&small_node, graph, nullptr, 0, &small), "cudaGraphAddNode")) return 1;
  cudaGraphNodeParams small_free_params{};
  small_free_params.type = cudaGraphNodeTypeMemFree;
  small_free_params.free.dptr = small.alloc.dptr;
  if (checked(runtime_add_node(&small_free, graph, &small_node, 1, &small_free_params), "cudaGraphAddNode")) return 1;
  if (checked(cudaGraphDestroy(graph), "cudaGraphDestroy")) return 1;

  void *mem_alloc = nullptr, *mem_free = nullptr;
  CUdriverProcAddressQueryResult status;
  auto lookup = reinterpret_cast<GetProcAddress>(get_proc);
  if (lookup("cuMemAlloc", &mem_alloc, 12020, 0, &status) || lookup("cuMemFree", &mem_free, 12020, 0, &status))
    return 1;
  CUdeviceptr p = 0;
  if (reinterpret_cast<CUresult (*)(CUdeviceptr*, size_t)>(mem_alloc)(&p, 1 << 20) != CUDA_SUCCESS) return 1;
  return reinterpret_cast<CUresult (*)(CUdeviceptr)>(mem_free)(p) == CUDA_SUCCESS ? 0 : 1;
}

// The device the plugin's runtime says P is on, -1 when it cannot say.
int plugin_device_of(const void* p) {
  cudaPointerAttributes attributes{};
  return cudaPointerGetAttributes(&attributes, p) == cudaSuccess ? attributes.device : -1;
}

}  // extern "C"
