// The runtime API of the simulated device (libcudart.so.13). Like NVIDIA's runtime it serves
// allocations through the driver, reached only through the functions the driver handed it at its
// initialization (runtime_driver.h), never by symbol: the shared library and the static archive
// alike. An interposer may see both a runtime call and the driver
// call inside it, and must count one event.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cupti.h>

#include <cstddef>
#include <cstring>
#include <optional>
#include <type_traits>

#include "api_callbacks.h"
#include "ledger.h"
#include "memtrace/base/cuda12_abi.h"
#include "runtime_driver.h"

extern "C" {
cudaError_t cudaMallocAsync_ptsz(void**, size_t, cudaStream_t);
cudaError_t cudaFreeAsync_ptsz(void*, cudaStream_t);
cudaError_t cudaMallocFromPoolAsync_ptsz(void**, size_t, cudaMemPool_t, cudaStream_t);
cudaError_t cudaGetDriverEntryPoint_ptsz(const char*, void**, unsigned long long, cudaDriverEntryPointQueryResult*);
cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char*, void**, unsigned int, unsigned long long,
                                                  cudaDriverEntryPointQueryResult*);
cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t, cudaStreamCaptureMode);
cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t, cudaGraph_t*);
cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t, cudaStreamCaptureStatus*);
}

namespace {

using sim_runtime::Driver;

// The vendored copy of this library (built as a CUDA 12 runtime) says so.
#ifdef MEMTRACE_SIM_RUNTIME_VERSION
constexpr int kRuntimeVersion = MEMTRACE_SIM_RUNTIME_VERSION;
#else
constexpr int kRuntimeVersion = CUDART_VERSION;
#endif

constexpr int kRuntimeApi = CUPTI_CB_DOMAIN_RUNTIME_API;

thread_local int t_device = 0;
thread_local cudaError_t t_last_error = cudaSuccess;

// Driver and runtime share the numbers of every error this device returns.
cudaError_t to_error(CUresult r) { return static_cast<cudaError_t>(r); }

cudaError_t remember(cudaError_t e) {
  if (e != cudaSuccess) t_last_error = e;
  return e;
}

// The runtime's implicit initialization (runtime_driver.h): the driver reached and initialized.
const Driver* initialized_driver(cudaError_t& e) {
  const Driver* d = sim_runtime::driver(&e);
  if (!d) return nullptr;
  const CUresult init = sim_runtime::driver_init_result();
  e = init == CUDA_SUCCESS           ? cudaSuccess
      : init == CUDA_ERROR_NO_DEVICE ? cudaErrorNoDevice
                                     : cudaErrorInitializationError;
  return e == cudaSuccess ? d : nullptr;
}

// CALL with the driver, and (with_context) the current device's primary context made current on
// this thread; CALL takes the driver when it calls it.
template <typename Call>
cudaError_t call_with(const Driver& d, Call& call) {
  if constexpr (std::is_invocable_v<Call&, const Driver&>)
    return call(d);
  else
    return call();
}
template <typename Call>
cudaError_t with_driver(Call&& call) {
  cudaError_t e;
  const Driver* d = initialized_driver(e);
  return remember(d ? call_with(*d, call) : e);
}
template <typename Call>
cudaError_t with_context(Call&& call) {
  cudaError_t e;
  const Driver* d = initialized_driver(e);
  if (!d) return remember(e);
  CUcontext ctx;
  CUresult r = d->cuDevicePrimaryCtxRetain(&ctx, t_device);
  if (r == CUDA_SUCCESS) r = d->cuCtxSetCurrent(ctx);
  return remember(r == CUDA_SUCCESS ? call_with(*d, call) : to_error(r));
}

cudaError_t malloc_device(const char* api, void** ptr, size_t size) {
  sim::ApiCall call(api);
  if (!ptr) return call.done(remember(cudaErrorInvalidValue));
  if (size == 0) {  // the runtime hands out a null pointer for zero bytes
    *ptr = nullptr;
    return call.done(cudaSuccess);
  }
  return call.done(with_context([&](const Driver& d) {
                     CUdeviceptr p = 0;
                     cudaError_t e = to_error(d.cuMemAlloc(&p, size));
                     if (e == cudaSuccess) *ptr = reinterpret_cast<void*>(p);
                     return e;
                   }),
                   size);
}

// Frees count the bytes they release; the size must be read before the memory goes.
template <typename Free>
cudaError_t free_call(const char* api, void* ptr, Free&& free) {
  sim::ApiCall call(api);
  uint64_t size = sim::hooks().allocation_size(reinterpret_cast<uint64_t>(ptr));
  return call.done(with_context(free), size);
}

cudaError_t malloc_async(const char* api, void** ptr, size_t size, cudaStream_t stream, bool per_thread) {
  sim::ApiCall call(api);
  if (!ptr) return call.done(remember(cudaErrorInvalidValue));
  return call.done(with_context([&](const Driver& d) {
                     CUdeviceptr p = 0;
                     auto s = reinterpret_cast<CUstream>(stream);
                     CUresult r = per_thread ? d.cuMemAllocAsync_ptsz(&p, size, s) : d.cuMemAllocAsync(&p, size, s);
                     if (r == CUDA_SUCCESS) *ptr = reinterpret_cast<void*>(p);
                     return to_error(r);
                   }),
                   size);
}

cudaError_t malloc_from_pool(void** ptr, size_t size, cudaMemPool_t pool, cudaStream_t stream) {
  sim::ApiCall call("cudaMallocFromPoolAsync");
  if (!ptr) return call.done(remember(cudaErrorInvalidValue));
  return call.done(with_context([&](const Driver& d) {
                     CUdeviceptr p = 0;
                     CUresult r = d.cuMemAllocFromPoolAsync(&p, size, reinterpret_cast<CUmemoryPool>(pool),
                                                            reinterpret_cast<CUstream>(stream));
                     if (r == CUDA_SUCCESS) *ptr = reinterpret_cast<void*>(p);
                     return to_error(r);
                   }),
                   size);
}

cudaError_t host_alloc(const char* api, void** ptr, size_t size, unsigned int flags) {
  sim::ApiCall call(api);
  if (!ptr) return call.done(remember(cudaErrorInvalidValue));
  if (size == 0) {
    *ptr = nullptr;
    return call.done(cudaSuccess);
  }
  return call.done(with_context([&](const Driver& d) { return to_error(d.cuMemHostAlloc(ptr, size, flags)); }), size);
}

cudaError_t entry_point(const char* symbol, void** fn, unsigned int version, unsigned long long flags,
                        cudaDriverEntryPointQueryResult* status) {
  if (!symbol || !fn) return remember(cudaErrorInvalidValue);
  return with_context([&](const Driver& d) {
    CUdriverProcAddressQueryResult found;
    CUresult r = d.cuGetProcAddress(symbol, fn, static_cast<int>(version), flags, &found);
    if (status)
      *status = found == CU_GET_PROC_ADDRESS_SUCCESS ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
    // A symbol that is not there is not an error of the call, only of the lookup.
    return r == CUDA_ERROR_NOT_FOUND ? cudaSuccess : to_error(r);
  });
}

// The generic node API goes to the driver's (NVIDIA's sends cudaGraphAddNode to cuGraphAddNode_v2:
// ../shared/observed/cudart-13.0-driver-lookups.md); a memory node is ledgered under the call and
// its type, as the driver ledgers its own. Node parameters have the driver's layout and values.
// A CUDA 12 runtime's cudaGraphAddNode takes no edge data (memtrace/base/cuda12_abi.h): the
// vendored CUDA 12.2 copy has that one, and sends it to the driver's CUDA 12.2 ABI.
static_assert(sizeof(cudaGraphNodeParams) == sizeof(CUgraphNodeParams) &&
              offsetof(cudaGraphNodeParams, alloc) == offsetof(CUgraphNodeParams, alloc) &&
              static_cast<int>(cudaGraphNodeTypeMemAlloc) == CU_GRAPH_NODE_TYPE_MEM_ALLOC &&
              static_cast<int>(cudaGraphNodeTypeMemFree) == CU_GRAPH_NODE_TYPE_MEM_FREE);
template <typename CallbackParams>
cudaError_t graph_add_node(int cbid, CallbackParams callback_params, cudaGraphNode_t* node, cudaGraph_t graph,
                           const cudaGraphNode_t* dependencies, const cudaGraphEdgeData* dependencyData, size_t count,
                           cudaGraphNodeParams* params) {
  return sim::traced(kRuntimeApi, cbid, "cudaGraphAddNode", callback_params, [&] {
    const bool alloc = params && params->type == cudaGraphNodeTypeMemAlloc;
    const bool free = params && params->type == cudaGraphNodeTypeMemFree;
    std::optional<sim::ApiCall> call;
    if (alloc || free) call.emplace(alloc ? "cudaGraphAddNode.mem_alloc" : "cudaGraphAddNode.mem_free");
    const uint64_t freed = free ? sim::hooks().allocation_size(reinterpret_cast<uint64_t>(params->free.dptr)) : 0;
    cudaError_t e = with_context([&](const Driver& d) {
      auto* n = reinterpret_cast<CUgraphNode*>(node);
      auto g = reinterpret_cast<CUgraph>(graph);
      auto* deps = reinterpret_cast<const CUgraphNode*>(dependencies);
      auto* p = reinterpret_cast<CUgraphNodeParams*>(params);
      return to_error(
          kRuntimeVersion >= memtrace::cuda12::kGraphAddNodeWithEdgesRuntime
              ? d.cuGraphAddNode(n, g, deps, reinterpret_cast<const CUgraphEdgeData*>(dependencyData), count, p)
              : d.cuGraphAddNode_v12020(n, g, deps, count, p));
    });
    return call ? call->done(e, alloc ? params->alloc.bytesize : freed) : e;
  });
}

}  // namespace

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  if (!count) return remember(cudaErrorInvalidValue);
  cudaError_t e = with_driver([&](const Driver& d) { return to_error(d.cuDeviceGetCount(count)); });
  if (e == cudaErrorNoDevice) *count = 0;
  return e;
}

cudaError_t cudaSetDevice(int device) {
  int count = 0;
  if (with_driver([&](const Driver& d) { return to_error(d.cuDeviceGetCount(&count)); }) != cudaSuccess)
    return remember(cudaErrorNoDevice);
  if (device < 0 || device >= count) return remember(cudaErrorInvalidDevice);
  t_device = device;
  return with_context([] { return cudaSuccess; });
}

cudaError_t cudaGetDevice(int* device) {
  if (!device) return remember(cudaErrorInvalidValue);
  *device = t_device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (!prop) return remember(cudaErrorInvalidValue);
  return with_context([&](const Driver& d) {
    size_t total = 0;
    CUresult r = d.cuDeviceTotalMem(&total, device);
    if (r != CUDA_SUCCESS) return to_error(r);
    std::memset(prop, 0, sizeof *prop);
    d.cuDeviceGetName(prop->name, sizeof prop->name, device);
    prop->totalGlobalMem = total;
    prop->major = 9;
    prop->minor = 0;
    prop->multiProcessorCount = 132;
    prop->warpSize = 32;
    prop->managedMemory = 1;
    prop->unifiedAddressing = 1;
    prop->texturePitchAlignment = 512;
    return cudaSuccess;
  });
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  return with_context([&](const Driver& d) {
    return to_error(d.cuDeviceGetAttribute(value, static_cast<CUdevice_attribute>(attr), device));
  });
}

cudaError_t cudaDeviceSynchronize(void) {
  return with_context([] { return cudaSuccess; });
}

cudaError_t cudaDeviceReset(void) {
  return with_context([](const Driver& d) { return to_error(d.cuDevicePrimaryCtxReset(t_device)); });
}

cudaError_t cudaRuntimeGetVersion(int* version) {
  if (!version) return remember(cudaErrorInvalidValue);
  *version = kRuntimeVersion;
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int* version) {
  cudaError_t e;
  const Driver* d = sim_runtime::driver(&e);  // the driver's version needs no initialized driver
  return remember(d ? to_error(d->cuDriverGetVersion(version)) : e);
}

cudaError_t cudaGetLastError(void) {
  cudaError_t e = t_last_error;
  t_last_error = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError(void) { return t_last_error; }

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError: return "cudaErrorInitializationError";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorSymbolNotFound: return "cudaErrorSymbolNotFound";
    default: return "cudaErrorUnknown";
  }
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    default: return "unknown error";
  }
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  return with_context([&](const Driver& d) { return to_error(d.cuMemGetInfo(free_bytes, total_bytes)); });
}

cudaError_t cudaMalloc(void** devPtr, size_t size) {
  return sim::traced(kRuntimeApi, CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, "cudaMalloc",
                     cudaMalloc_v3020_params{devPtr, size}, [&] { return malloc_device("cudaMalloc", devPtr, size); });
}

cudaError_t cudaFree(void* devPtr) {
  return sim::traced(kRuntimeApi, CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020, "cudaFree", cudaFree_v3020_params{devPtr},
                     [&] {
                       return free_call("cudaFree", devPtr, [&](const Driver& d) {
                         return devPtr ? to_error(d.cuMemFree(reinterpret_cast<CUdeviceptr>(devPtr))) : cudaSuccess;
                       });
                     });
}

cudaError_t cudaMallocAsync(void** devPtr, size_t size, cudaStream_t stream) {
  return sim::traced(kRuntimeApi, CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_v11020, "cudaMallocAsync",
                     cudaMallocAsync_v11020_params{devPtr, size, stream},
                     [&] { return malloc_async("cudaMallocAsync", devPtr, size, stream, false); });
}

cudaError_t cudaMallocAsync_ptsz(void** devPtr, size_t size, cudaStream_t stream) {
  return sim::traced(kRuntimeApi, CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_ptsz_v11020, "cudaMallocAsync_ptsz",
                     cudaMallocAsync_ptsz_v11020_params{devPtr, size, stream},
                     [&] { return malloc_async("cudaMallocAsync", devPtr, size, stream, true); });
}

cudaError_t cudaFreeAsync(void* devPtr, cudaStream_t stream) {
  return sim::traced(
      kRuntimeApi, CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_v11020, "cudaFreeAsync",
      cudaFreeAsync_v11020_params{devPtr, stream}, [&] {
        return free_call("cudaFreeAsync", devPtr, [&](const Driver& d) {
          return to_error(d.cuMemFreeAsync(reinterpret_cast<CUdeviceptr>(devPtr), reinterpret_cast<CUstream>(stream)));
        });
      });
}

cudaError_t cudaFreeAsync_ptsz(void* devPtr, cudaStream_t stream) {
  return sim::traced(kRuntimeApi, CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_ptsz_v11020, "cudaFreeAsync_ptsz",
                     cudaFreeAsync_ptsz_v11020_params{devPtr, stream}, [&] {
                       return free_call("cudaFreeAsync", devPtr, [&](const Driver& d) {
                         return to_error(d.cuMemFreeAsync_ptsz(reinterpret_cast<CUdeviceptr>(devPtr),
                                                               reinterpret_cast<CUstream>(stream)));
                       });
                     });
}

cudaError_t cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t pool, cudaStream_t stream) {
  return sim::traced(kRuntimeApi, CUPTI_RUNTIME_TRACE_CBID_cudaMallocFromPoolAsync_v11020, "cudaMallocFromPoolAsync",
                     cudaMallocFromPoolAsync_v11020_params{ptr, size, pool, stream},
                     [&] { return malloc_from_pool(ptr, size, pool, stream); });
}

cudaError_t cudaMallocFromPoolAsync_ptsz(void** ptr, size_t size, cudaMemPool_t pool, cudaStream_t stream) {
  return sim::traced(kRuntimeApi, CUPTI_RUNTIME_TRACE_CBID_cudaMallocFromPoolAsync_ptsz_v11020,
                     "cudaMallocFromPoolAsync_ptsz",
                     cudaMallocFromPoolAsync_ptsz_v11020_params{ptr, size, pool, stream},
                     [&] { return malloc_from_pool(ptr, size, pool, stream); });
}

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) {
  return with_context([&](const Driver& d) {
    return to_error(d.cuDeviceGetDefaultMemPool(reinterpret_cast<CUmemoryPool*>(pool), device));
  });
}

cudaError_t cudaMemPoolCreate(cudaMemPool_t* pool, const cudaMemPoolProps* props) {
  if (!pool || !props) return remember(cudaErrorInvalidValue);
  return with_context([&](const Driver& d) {
    CUmemPoolProps p{};
    p.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type =
        props->location.type == cudaMemLocationTypeDevice ? CU_MEM_LOCATION_TYPE_DEVICE : CU_MEM_LOCATION_TYPE_INVALID;
    p.location.id = props->location.id;
    return to_error(d.cuMemPoolCreate(reinterpret_cast<CUmemoryPool*>(pool), &p));
  });
}

cudaError_t cudaMemPoolDestroy(cudaMemPool_t pool) {
  return with_context(
      [&](const Driver& d) { return to_error(d.cuMemPoolDestroy(reinterpret_cast<CUmemoryPool>(pool))); });
}

cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t keep) {
  return with_context(
      [&](const Driver& d) { return to_error(d.cuMemPoolTrimTo(reinterpret_cast<CUmemoryPool>(pool), keep)); });
}

// The runtime's pool attributes are the driver's, value for value (cudaMemPoolAttr matches
// CUmemPool_attribute).
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  return with_driver([&](const Driver& d) {
    return to_error(
        d.cuMemPoolSetAttribute(reinterpret_cast<CUmemoryPool>(pool), static_cast<CUmemPool_attribute>(attr), value));
  });
}

cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  return with_driver([&](const Driver& d) {
    return to_error(
        d.cuMemPoolGetAttribute(reinterpret_cast<CUmemoryPool>(pool), static_cast<CUmemPool_attribute>(attr), value));
  });
}

cudaError_t cudaMallocManaged(void** devPtr, size_t size, unsigned int flags) {
  return sim::traced(kRuntimeApi, CUPTI_RUNTIME_TRACE_CBID_cudaMallocManaged_v6000, "cudaMallocManaged",
                     cudaMallocManaged_v6000_params{devPtr, size, flags}, [&] {
                       sim::ApiCall call("cudaMallocManaged");
                       if (!devPtr || size == 0) return call.done(remember(cudaErrorInvalidValue));
                       return call.done(with_context([&](const Driver& d) {
                                          CUdeviceptr p = 0;
                                          cudaError_t e = to_error(d.cuMemAllocManaged(&p, size, flags));
                                          if (e == cudaSuccess) *devPtr = reinterpret_cast<void*>(p);
                                          return e;
                                        }),
                                        size);
                     });
}

cudaError_t cudaMallocHost(void** ptr, size_t size) {
  return sim::traced(kRuntimeApi, CUPTI_RUNTIME_TRACE_CBID_cudaMallocHost_v3020, "cudaMallocHost",
                     cudaMallocHost_v3020_params{ptr, size},
                     [&] { return host_alloc("cudaMallocHost", ptr, size, 0); });
}

cudaError_t cudaHostAlloc(void** pHost, size_t size, unsigned int flags) {
  return sim::traced(kRuntimeApi, CUPTI_RUNTIME_TRACE_CBID_cudaHostAlloc_v3020, "cudaHostAlloc",
                     cudaHostAlloc_v3020_params{pHost, size, flags},
                     [&] { return host_alloc("cudaHostAlloc", pHost, size, flags); });
}

cudaError_t cudaFreeHost(void* ptr) {
  return sim::traced(
      kRuntimeApi, CUPTI_RUNTIME_TRACE_CBID_cudaFreeHost_v3020, "cudaFreeHost", cudaFreeHost_v3020_params{ptr}, [&] {
        return free_call("cudaFreeHost", ptr,
                         [&](const Driver& d) { return ptr ? to_error(d.cuMemFreeHost(ptr)) : cudaSuccess; });
      });
}

cudaError_t cudaMallocPitch(void** devPtr, size_t* pitch, size_t width, size_t height) {
  return sim::traced(kRuntimeApi, CUPTI_RUNTIME_TRACE_CBID_cudaMallocPitch_v3020, "cudaMallocPitch",
                     cudaMallocPitch_v3020_params{devPtr, pitch, width, height}, [&] {
                       sim::ApiCall call("cudaMallocPitch");
                       if (!devPtr || !pitch) return call.done(remember(cudaErrorInvalidValue));
                       size_t bytes = 0;
                       cudaError_t e = with_context([&](const Driver& d) {
                         CUdeviceptr p = 0;
                         cudaError_t err = to_error(d.cuMemAllocPitch(&p, pitch, width, height, 4));
                         if (err == cudaSuccess) *devPtr = reinterpret_cast<void*>(p), bytes = *pitch * height;
                         return err;
                       });
                       return call.done(e, bytes);
                     });
}

cudaError_t cudaMalloc3D(cudaPitchedPtr* pitchedDevPtr, cudaExtent extent) {
  return sim::traced(
      kRuntimeApi, CUPTI_RUNTIME_TRACE_CBID_cudaMalloc3D_v3020, "cudaMalloc3D",
      cudaMalloc3D_v3020_params{pitchedDevPtr, extent}, [&] {
        sim::ApiCall call("cudaMalloc3D");
        if (!pitchedDevPtr) return call.done(remember(cudaErrorInvalidValue));
        size_t bytes = 0;
        cudaError_t e = with_context([&](const Driver& d) {
          CUdeviceptr p = 0;
          size_t pitch = 0;
          cudaError_t err = to_error(d.cuMemAllocPitch(&p, &pitch, extent.width, extent.height * extent.depth, 4));
          if (err == cudaSuccess) {
            *pitchedDevPtr = cudaPitchedPtr{reinterpret_cast<void*>(p), pitch, extent.width, extent.height};
            bytes = pitch * extent.height * extent.depth;
          }
          return err;
        });
        return call.done(e, bytes);
      });
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind) {
  return with_context([&] {
    std::memmove(dst, src, count);
    return cudaSuccess;
  });
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t) {
  return cudaMemcpy(dst, src, count, kind);
}

cudaError_t cudaMemset(void* dst, int value, size_t count) {
  return with_context([&] {
    std::memset(dst, value, count);
    return cudaSuccess;
  });
}

cudaError_t cudaMemsetAsync(void* dst, int value, size_t count, cudaStream_t) { return cudaMemset(dst, value, count); }

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  return with_context(
      [&](const Driver& d) { return to_error(d.cuStreamCreate(reinterpret_cast<CUstream*>(stream), 0)); });
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  return with_context(
      [&](const Driver& d) { return to_error(d.cuStreamCreate(reinterpret_cast<CUstream*>(stream), flags)); });
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  return with_context([&](const Driver& d) { return to_error(d.cuStreamDestroy(reinterpret_cast<CUstream>(stream))); });
}

cudaError_t cudaStreamSynchronize(cudaStream_t) {
  return with_context([] { return cudaSuccess; });
}

// Stream capture goes to the driver; the runtime's and the driver's capture statuses, modes and
// handles have the same values.
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  return with_context([&](const Driver& d) {
    return to_error(d.cuStreamBeginCapture(reinterpret_cast<CUstream>(stream), static_cast<CUstreamCaptureMode>(mode)));
  });
}
cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t stream, cudaStreamCaptureMode mode) {
  return with_context([&](const Driver& d) {
    return to_error(
        d.cuStreamBeginCapture_ptsz(reinterpret_cast<CUstream>(stream), static_cast<CUstreamCaptureMode>(mode)));
  });
}
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  return with_context([&](const Driver& d) {
    return to_error(d.cuStreamEndCapture(reinterpret_cast<CUstream>(stream), reinterpret_cast<CUgraph*>(graph)));
  });
}
cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t* graph) {
  return with_context([&](const Driver& d) {
    return to_error(d.cuStreamEndCapture_ptsz(reinterpret_cast<CUstream>(stream), reinterpret_cast<CUgraph*>(graph)));
  });
}
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  return with_context([&](const Driver& d) {
    return to_error(
        d.cuStreamIsCapturing(reinterpret_cast<CUstream>(stream), reinterpret_cast<CUstreamCaptureStatus*>(status)));
  });
}
cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  return with_context([&](const Driver& d) {
    return to_error(d.cuStreamIsCapturing_ptsz(reinterpret_cast<CUstream>(stream),
                                               reinterpret_cast<CUstreamCaptureStatus*>(status)));
  });
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  return with_driver([&](const Driver& d) { return to_error(d.cuGraphDestroy(reinterpret_cast<CUgraph>(graph))); });
}

// CUDA graphs and their memory nodes go to the driver, whose structures the runtime's mirror.
static_assert(sizeof(cudaMemAllocNodeParams) == sizeof(CUDA_MEM_ALLOC_NODE_PARAMS));
cudaError_t cudaGraphCreate(cudaGraph_t* graph, unsigned int flags) {
  return with_context(
      [&](const Driver& d) { return to_error(d.cuGraphCreate(reinterpret_cast<CUgraph*>(graph), flags)); });
}

cudaError_t cudaGraphAddMemAllocNode(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* dependencies,
                                     size_t count, cudaMemAllocNodeParams* params) {
  return sim::traced(kRuntimeApi, CUPTI_RUNTIME_TRACE_CBID_cudaGraphAddMemAllocNode_v11040, "cudaGraphAddMemAllocNode",
                     cudaGraphAddMemAllocNode_v11040_params{node, graph, dependencies, count, params}, [&] {
                       sim::ApiCall call("cudaGraphAddMemAllocNode");
                       return call.done(with_context([&](const Driver& d) {
                                          return to_error(d.cuGraphAddMemAllocNode(
                                              reinterpret_cast<CUgraphNode*>(node), reinterpret_cast<CUgraph>(graph),
                                              reinterpret_cast<const CUgraphNode*>(dependencies), count,
                                              reinterpret_cast<CUDA_MEM_ALLOC_NODE_PARAMS*>(params)));
                                        }),
                                        params ? params->bytesize : 0);
                     });
}

cudaError_t cudaGraphAddMemFreeNode(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* dependencies,
                                    size_t count, void* dptr) {
  return sim::traced(kRuntimeApi, CUPTI_RUNTIME_TRACE_CBID_cudaGraphAddMemFreeNode_v11040, "cudaGraphAddMemFreeNode",
                     cudaGraphAddMemFreeNode_v11040_params{node, graph, dependencies, count, dptr}, [&] {
                       sim::ApiCall call("cudaGraphAddMemFreeNode");
                       const uint64_t size = sim::hooks().allocation_size(reinterpret_cast<uint64_t>(dptr));
                       return call.done(with_context([&](const Driver& d) {
                                          return to_error(d.cuGraphAddMemFreeNode(
                                              reinterpret_cast<CUgraphNode*>(node), reinterpret_cast<CUgraph>(graph),
                                              reinterpret_cast<const CUgraphNode*>(dependencies), count,
                                              reinterpret_cast<CUdeviceptr>(dptr)));
                                        }),
                                        size);
                     });
}

#if !defined(MEMTRACE_SIM_RUNTIME_VERSION) || MEMTRACE_SIM_RUNTIME_VERSION >= 13000
cudaError_t cudaGraphAddNode(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* dependencies,
                             const cudaGraphEdgeData* dependencyData, size_t count, cudaGraphNodeParams* params) {
  return graph_add_node(CUPTI_RUNTIME_TRACE_CBID_cudaGraphAddNode_v12030,
                        cudaGraphAddNode_v12030_params{node, graph, dependencies, dependencyData, count, params}, node,
                        graph, dependencies, dependencyData, count, params);
}
#else
// CUDA 12.2's, by the symbol the 13.0 headers give another signature.
cudaError_t cuda12_graph_add_node(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* dependencies,
                                  size_t count, cudaGraphNodeParams* params) __asm__("cudaGraphAddNode");
cudaError_t cuda12_graph_add_node(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* dependencies,
                                  size_t count, cudaGraphNodeParams* params) {
  return graph_add_node(CUPTI_RUNTIME_TRACE_CBID_cudaGraphAddNode_v12020,
                        memtrace::cuda12::cudaGraphAddNode_v12020_params{node, graph, dependencies, count, params},
                        node, graph, dependencies, nullptr, count, params);
}
#endif

cudaError_t cudaGraphNodeSetParams(cudaGraphNode_t node, cudaGraphNodeParams* params) {
  return with_context([&](const Driver& d) {
    return to_error(
        d.cuGraphNodeSetParams(reinterpret_cast<CUgraphNode>(node), reinterpret_cast<CUgraphNodeParams*>(params)));
  });
}

cudaError_t cudaGraphExecNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node, cudaGraphNodeParams* params) {
  return with_context([&](const Driver& d) {
    return to_error(d.cuGraphExecNodeSetParams(reinterpret_cast<CUgraphExec>(exec), reinterpret_cast<CUgraphNode>(node),
                                               reinterpret_cast<CUgraphNodeParams*>(params)));
  });
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags) {
  return with_context([&](const Driver& d) {
    return to_error(
        d.cuGraphInstantiateWithFlags(reinterpret_cast<CUgraphExec*>(exec), reinterpret_cast<CUgraph>(graph), flags));
  });
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  return with_context([&](const Driver& d) {
    return to_error(d.cuGraphLaunch(reinterpret_cast<CUgraphExec>(exec), reinterpret_cast<CUstream>(stream)));
  });
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  return with_driver(
      [&](const Driver& d) { return to_error(d.cuGraphExecDestroy(reinterpret_cast<CUgraphExec>(exec))); });
}

cudaError_t cudaDeviceGetGraphMemAttribute(int device, cudaGraphMemAttributeType attr, void* value) {
  return with_context([&](const Driver& d) {
    return to_error(d.cuDeviceGetGraphMemAttribute(device, static_cast<CUgraphMem_attribute>(attr), value));
  });
}

cudaError_t cudaDeviceGraphMemTrim(int device) {
  return with_context([&](const Driver& d) { return to_error(d.cuDeviceGraphMemTrim(device)); });
}

// IPC: handles to allocations, opened in other processes; the driver's handle is the runtime's.
static_assert(sizeof(cudaIpcMemHandle_t) == sizeof(CUipcMemHandle));
cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t* handle, void* ptr) {
  return with_context([&](const Driver& d) {
    return to_error(d.cuIpcGetMemHandle(reinterpret_cast<CUipcMemHandle*>(handle), reinterpret_cast<CUdeviceptr>(ptr)));
  });
}

cudaError_t cudaIpcOpenMemHandle(void** ptr, cudaIpcMemHandle_t handle, unsigned int flags) {
  return sim::traced(kRuntimeApi, CUPTI_RUNTIME_TRACE_CBID_cudaIpcOpenMemHandle_v4010, "cudaIpcOpenMemHandle",
                     cudaIpcOpenMemHandle_v4010_params{ptr, handle, flags}, [&] {
                       sim::ApiCall call("cudaIpcOpenMemHandle");
                       if (!ptr) return call.done(remember(cudaErrorInvalidValue));
                       CUdeviceptr p = 0;
                       cudaError_t e = with_context([&](const Driver& d) {
                         CUipcMemHandle h;
                         std::memcpy(&h, &handle, sizeof h);
                         return to_error(d.cuIpcOpenMemHandle(&p, h, flags));
                       });
                       if (e == cudaSuccess) *ptr = reinterpret_cast<void*>(p);
                       return call.done(e, e == cudaSuccess ? sim::hooks().allocation_size(p) : 0);
                     });
}

// Pool allocations shared by pointer (NVIDIA's runtime sends cudaMemPoolImportPointer to
// cuMemPoolImportPointer); the export data is the driver's.
static_assert(sizeof(cudaMemPoolPtrExportData) == sizeof(CUmemPoolPtrExportData));
cudaError_t cudaMemPoolExportPointer(cudaMemPoolPtrExportData* data, void* ptr) {
  return with_context([&](const Driver& d) {
    return to_error(
        d.cuMemPoolExportPointer(reinterpret_cast<CUmemPoolPtrExportData*>(data), reinterpret_cast<CUdeviceptr>(ptr)));
  });
}

cudaError_t cudaMemPoolImportPointer(void** ptr, cudaMemPool_t pool, cudaMemPoolPtrExportData* data) {
  return sim::traced(kRuntimeApi, CUPTI_RUNTIME_TRACE_CBID_cudaMemPoolImportPointer_v11020, "cudaMemPoolImportPointer",
                     cudaMemPoolImportPointer_v11020_params{ptr, pool, data}, [&] {
                       sim::ApiCall call("cudaMemPoolImportPointer");
                       if (!ptr) return call.done(remember(cudaErrorInvalidValue));
                       CUdeviceptr p = 0;
                       cudaError_t e = with_context([&](const Driver& d) {
                         return to_error(d.cuMemPoolImportPointer(&p, reinterpret_cast<CUmemoryPool>(pool),
                                                                  reinterpret_cast<CUmemPoolPtrExportData*>(data)));
                       });
                       if (e == cudaSuccess) *ptr = reinterpret_cast<void*>(p);
                       return call.done(e, e == cudaSuccess ? sim::hooks().allocation_size(p) : 0);
                     });
}

cudaError_t cudaIpcCloseMemHandle(void* ptr) {
  return sim::traced(kRuntimeApi, CUPTI_RUNTIME_TRACE_CBID_cudaIpcCloseMemHandle_v4010, "cudaIpcCloseMemHandle",
                     cudaIpcCloseMemHandle_v4010_params{ptr}, [&] {
                       return free_call("cudaIpcCloseMemHandle", ptr, [&](const Driver& d) {
                         return to_error(d.cuIpcCloseMemHandle(reinterpret_cast<CUdeviceptr>(ptr)));
                       });
                     });
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* ptr) {
  if (!attributes) return remember(cudaErrorInvalidValue);
  return with_context([&](const Driver& d) {
    int device = -1;
    CUresult r =
        d.cuPointerGetAttribute(&device, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, reinterpret_cast<CUdeviceptr>(ptr));
    *attributes = cudaPointerAttributes{};
    attributes->type = r == CUDA_SUCCESS ? cudaMemoryTypeDevice : cudaMemoryTypeUnregistered;
    attributes->device = r == CUDA_SUCCESS ? device : -1;
    attributes->devicePointer = r == CUDA_SUCCESS ? const_cast<void*>(ptr) : nullptr;
    return cudaSuccess;
  });
}

cudaError_t cudaLaunchKernel(const void*, dim3, dim3, void**, size_t, cudaStream_t) {
  return with_context([] { return cudaSuccess; });
}

// The driver's functions at the ABI of this runtime's own release (CUDA Runtime API,
// cudaGetDriverEntryPoint: "the CUDA version the runtime was built with").
cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** funcPtr, unsigned long long flags,
                                    cudaDriverEntryPointQueryResult* driverStatus) {
  return entry_point(symbol, funcPtr, kRuntimeVersion, flags, driverStatus);
}

cudaError_t cudaGetDriverEntryPoint_ptsz(const char* symbol, void** funcPtr, unsigned long long flags,
                                         cudaDriverEntryPointQueryResult* driverStatus) {
  return entry_point(symbol, funcPtr, kRuntimeVersion,
                     flags ? flags : static_cast<unsigned long long>(cudaEnablePerThreadDefaultStream), driverStatus);
}

cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** funcPtr, unsigned int cudaVersion,
                                             unsigned long long flags, cudaDriverEntryPointQueryResult* driverStatus) {
  return entry_point(symbol, funcPtr, cudaVersion, flags, driverStatus);
}

cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char* symbol, void** funcPtr, unsigned int cudaVersion,
                                                  unsigned long long flags,
                                                  cudaDriverEntryPointQueryResult* driverStatus) {
  return entry_point(symbol, funcPtr, cudaVersion,
                     flags ? flags : static_cast<unsigned long long>(cudaEnablePerThreadDefaultStream), driverStatus);
}

// What nvcc-built programs call at start-up to register their kernels: accepted, remembered nowhere.
void** __cudaRegisterFatBinary(void*) {
  static void* handle = nullptr;
  return &handle;
}
void __cudaRegisterFatBinaryEnd(void**) {}
void __cudaUnregisterFatBinary(void**) {}
void __cudaRegisterFunction(void**, const char*, char*, const char*, int, uint3*, uint3*, dim3*, dim3*, int*) {}
unsigned __cudaPushCallConfiguration(dim3, dim3, size_t, void*) { return 0; }
cudaError_t __cudaPopCallConfiguration(dim3*, dim3*, size_t*, void*) { return cudaSuccess; }

}  // extern "C"
