// The CUPTI layer: the injector is also a CUDA injection library (CUDA_INJECTION64_PATH, whose
// InitializeInjection the driver calls on its first cuInit). It subscribes to CUPTI's callbacks
// for the allocation calls of the driver and the runtime, by callback id (never whole domains),
// and records from inside them, with stacks, the calls no interposer recorded: a call the program
// made is named after itself (cudaMalloc, not the cuMemAlloc it makes inside).
//
// CUPTI 13.0 takes one subscriber per process. When another tool holds it (Nsight, a sanitizer,
// PyTorch's profiler), memtrace says so once and records through its interposers; when a tool asks
// for it later (its cuptiSubscribe reaches memtrace's first), memtrace lets go, says so, and the
// interposers take over. Where CUPTI takes several (13.3 and later), memtrace asks for that, and a
// tool that asks for it too subscribes beside memtrace, which keeps CUPTI. A CUPTI that cannot
// take a subscriber yet (before the driver initialized) is asked again when the driver loads
// memtrace (InitializeInjection). It never calls cuptiFinalize, which would take CUPTI from everyone.
#include <cupti.h>
#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <mutex>
#include <new>
#include <string>

#include "interpose.h"
#include "memtrace/base/cuda12_abi.h"
#include "memtrace/base/cupti_subscriber_params.h"
#include "memtrace/ring/environment.h"
#include "settings.h"
#include "thread_block.h"

namespace memtrace::inject {

std::atomic<bool> g_interposers_record{true};
thread_local bool t_interposer_recording __attribute__((tls_model("initial-exec"))) = false;
thread_local int t_cupti_depth __attribute__((tls_model("initial-exec"))) = 0;
thread_local uint32_t t_cupti_generation __attribute__((tls_model("initial-exec"))) = 0;
std::atomic<uint32_t> g_cupti_generation{1};

Backend backend() {
  static const Backend b = [] {
    const char* v = setting(env::kBackend);
    if (v && std::strcmp(v, "cupti") == 0) return Backend::kCupti;
    if (v && std::strcmp(v, "auto") == 0) return Backend::kAuto;
    return Backend::kPreload;
  }();
  return b;
}

namespace {

// What each callback id is, and how its parameters (CUPTI's structures, generated_*_meta.h) and
// result become an event. FREE calls are ordered at entry (another thread may get the address
// once the real call returns); allocations are filled in at exit.
struct Handler {
  CUpti_CallbackDomain domain;
  CUpti_CallbackId cbid;
  Api api;
  void (*at_entry)(Call& call, const void* params);             // frees
  void (*at_exit)(Call& call, const void* params, int result);  // everything
  // Where the call's parameters decide what it is (the generic node API): its API, or kUnknown
  // for a call that holds no memory.
  Api (*api_for)(const void* params) = nullptr;
};

template <typename P>
const P& params_of(const void* p) {
  return *static_cast<const P*>(p);
}

auto ctx_device(const Call&) {
  return [] { return driver_device(0); };
}
auto pointer_or_ctx_device(const Call& call) { return device_of_pointer(call, driver_device); }

// A free: what it releases, ordered before the real call.
void free_entry(Call& call, uint64_t addr, uint64_t size, const void* stream) {
  call.event.addr = addr;
  call.event.size = size;
  call.event.stream = reinterpret_cast<uint64_t>(stream);
  call.stamp_before();
}
void free_exit(Call& call, int result, const void* stream, Ordering ordering) {
  tag_if_captured(call, ordering, result == 0, stream);
  call.finish(result);
}

// The generic node API (P: its parameters; kGraph: their graph member): an allocation node is
// ALLOC, a free node FREE; other nodes hold no memory.
template <typename P, auto kGraph, Api kAlloc, Api kFree>
struct GenericNode {
  static Api api_for(const void* raw) { return graph_node_api(params_of<P>(raw).nodeParams, kAlloc, kFree); }
  static void at_entry(Call& call, const void* raw) {
    if (call.event.api == kFree) free_entry(call, as_address(params_of<P>(raw).nodeParams->free.dptr), 0, nullptr);
  }
  static void at_exit(Call& call, const void* raw, int result) {
    const P& p = params_of<P>(raw);
    if (call.event.api == kFree) return free_exit(call, result, nullptr, Ordering::kImmediate);
    record_graph_node(call, result, as_address(p.nodeParams->alloc.dptr), p.nodeParams->alloc.bytesize, p.*kGraph,
                      location_device(p.nodeParams->alloc.poolProps.location));
  }
};
template <typename Node>
constexpr Handler generic_node(CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  return Handler{domain, cbid, Api::kUnknown, &Node::at_entry, &Node::at_exit, &Node::api_for};
}
using RuntimeAddNode = GenericNode<cudaGraphAddNode_v12030_params, &cudaGraphAddNode_v12030_params::graph,
                                   Api::kCudaGraphAddNodeMemAlloc, Api::kCudaGraphAddNodeMemFree>;
using RuntimeAddNodeCuda12 =
    GenericNode<cuda12::cudaGraphAddNode_v12020_params, &cuda12::cudaGraphAddNode_v12020_params::graph,
                Api::kCudaGraphAddNodeMemAlloc, Api::kCudaGraphAddNodeMemFree>;
using DriverAddNode = GenericNode<cuGraphAddNode_params, &cuGraphAddNode_params::hGraph, Api::kCuGraphAddNodeMemAlloc,
                                  Api::kCuGraphAddNodeMemFree>;
using DriverAddNodeV2 = GenericNode<cuGraphAddNode_v2_params, &cuGraphAddNode_v2_params::hGraph,
                                    Api::kCuGraphAddNodeMemAlloc, Api::kCuGraphAddNodeMemFree>;

#define MEMTRACE_ALLOC(domain, cbid, api, P, body)                            \
  Handler {                                                                   \
    domain, cbid, api, nullptr, [](Call& call, const void* raw, int result) { \
      const P& p = params_of<P>(raw);                                         \
      body;                                                                   \
    }                                                                         \
  }
#define MEMTRACE_FREE(domain, cbid, api, P, entry_body, ordering, stream) \
  Handler {                                                               \
    domain, cbid, api,                                                    \
        [](Call& call, const void* raw) {                                 \
          const P& p = params_of<P>(raw);                                 \
          entry_body;                                                     \
        },                                                                \
        [](Call& call, const void* raw, int result) {                     \
          const P& p = params_of<P>(raw);                                 \
          (void)p;                                                        \
          free_exit(call, result, stream, ordering);                      \
        }                                                                 \
  }

constexpr CUpti_CallbackDomain kRt = CUPTI_CB_DOMAIN_RUNTIME_API;
constexpr CUpti_CallbackDomain kDrv = CUPTI_CB_DOMAIN_DRIVER_API;

const Handler kHandlers[] = {
    // The runtime.
    MEMTRACE_ALLOC(kRt, CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, Api::kCudaMalloc, cudaMalloc_v3020_params,
                   record_after(call, result, address_of(result, p.devPtr), p.size, ctx_device(call))),
    MEMTRACE_FREE(kRt, CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020, Api::kCudaFree, cudaFree_v3020_params,
                  free_entry(call, reinterpret_cast<uint64_t>(p.devPtr), 0, nullptr), Ordering::kImmediate, nullptr),
    MEMTRACE_ALLOC(kRt, CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_v11020, Api::kCudaMallocAsync,
                   cudaMallocAsync_v11020_params,
                   record_after(call, result, address_of(result, p.devPtr), p.size, pointer_or_ctx_device(call),
                                p.hStream, Ordering::kStream)),
    MEMTRACE_ALLOC(kRt, CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_ptsz_v11020, Api::kCudaMallocAsync,
                   cudaMallocAsync_v11020_params,
                   record_after(call, result, address_of(result, p.devPtr), p.size, pointer_or_ctx_device(call),
                                p.hStream, Ordering::kPerThreadStream)),
    MEMTRACE_FREE(kRt, CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_v11020, Api::kCudaFreeAsync, cudaFreeAsync_v11020_params,
                  free_entry(call, reinterpret_cast<uint64_t>(p.devPtr), 0, p.hStream), Ordering::kStream, p.hStream),
    MEMTRACE_FREE(kRt, CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_ptsz_v11020, Api::kCudaFreeAsync,
                  cudaFreeAsync_v11020_params, free_entry(call, reinterpret_cast<uint64_t>(p.devPtr), 0, p.hStream),
                  Ordering::kPerThreadStream, p.hStream),
    MEMTRACE_ALLOC(kRt, CUPTI_RUNTIME_TRACE_CBID_cudaMallocFromPoolAsync_v11020, Api::kCudaMallocFromPoolAsync,
                   cudaMallocFromPoolAsync_v11020_params,
                   (call.event.handle = reinterpret_cast<uint64_t>(p.memPool),
                    record_after(call, result, address_of(result, p.ptr), p.size, pointer_or_ctx_device(call), p.stream,
                                 Ordering::kStream))),
    MEMTRACE_ALLOC(kRt, CUPTI_RUNTIME_TRACE_CBID_cudaMallocFromPoolAsync_ptsz_v11020, Api::kCudaMallocFromPoolAsync,
                   cudaMallocFromPoolAsync_v11020_params,
                   (call.event.handle = reinterpret_cast<uint64_t>(p.memPool),
                    record_after(call, result, address_of(result, p.ptr), p.size, pointer_or_ctx_device(call), p.stream,
                                 Ordering::kPerThreadStream))),
    MEMTRACE_ALLOC(kRt, CUPTI_RUNTIME_TRACE_CBID_cudaMallocManaged_v6000, Api::kCudaMallocManaged,
                   cudaMallocManaged_v6000_params,
                   record_after(call, result, address_of(result, p.devPtr), p.size, ctx_device(call))),
    MEMTRACE_ALLOC(kRt, CUPTI_RUNTIME_TRACE_CBID_cudaMallocHost_v3020, Api::kCudaMallocHost,
                   cudaMallocHost_v3020_params,
                   record_after(call, result, address_of(result, p.ptr), p.size, no_device)),
    MEMTRACE_ALLOC(kRt, CUPTI_RUNTIME_TRACE_CBID_cudaHostAlloc_v3020, Api::kCudaHostAlloc, cudaHostAlloc_v3020_params,
                   record_after(call, result, address_of(result, p.pHost), p.size, no_device)),
    MEMTRACE_FREE(kRt, CUPTI_RUNTIME_TRACE_CBID_cudaFreeHost_v3020, Api::kCudaFreeHost, cudaFreeHost_v3020_params,
                  free_entry(call, reinterpret_cast<uint64_t>(p.ptr), 0, nullptr), Ordering::kImmediate, nullptr),
    MEMTRACE_ALLOC(kRt, CUPTI_RUNTIME_TRACE_CBID_cudaMallocPitch_v3020, Api::kCudaMallocPitch,
                   cudaMallocPitch_v3020_params,
                   record_after(call, result, address_of(result, p.devPtr),
                                result == 0 && p.pitch ? uint64_t(*p.pitch) * p.height : uint64_t(p.width) * p.height,
                                ctx_device(call))),
    MEMTRACE_ALLOC(kRt, CUPTI_RUNTIME_TRACE_CBID_cudaMalloc3D_v3020, Api::kCudaMalloc3D, cudaMalloc3D_v3020_params,
                   record_after(call, result,
                                result == 0 && p.pitchedDevPtr ? reinterpret_cast<uint64_t>(p.pitchedDevPtr->ptr) : 0,
                                (result == 0 && p.pitchedDevPtr ? p.pitchedDevPtr->pitch : p.extent.width) *
                                    p.extent.height * p.extent.depth,
                                ctx_device(call))),
    MEMTRACE_ALLOC(kRt, CUPTI_RUNTIME_TRACE_CBID_cudaGraphAddMemAllocNode_v11040, Api::kCudaGraphAddMemAllocNode,
                   cudaGraphAddMemAllocNode_v11040_params,
                   record_graph_node(call, result, p.nodeParams ? reinterpret_cast<uint64_t>(p.nodeParams->dptr) : 0,
                                     p.nodeParams ? p.nodeParams->bytesize : 0, p.graph,
                                     p.nodeParams ? location_device(p.nodeParams->poolProps.location) : -1)),
    MEMTRACE_FREE(kRt, CUPTI_RUNTIME_TRACE_CBID_cudaGraphAddMemFreeNode_v11040, Api::kCudaGraphAddMemFreeNode,
                  cudaGraphAddMemFreeNode_v11040_params,
                  free_entry(call, reinterpret_cast<uint64_t>(p.dptr), 0, nullptr), Ordering::kImmediate, nullptr),
    generic_node<RuntimeAddNode>(kRt, CUPTI_RUNTIME_TRACE_CBID_cudaGraphAddNode_v12030),
    generic_node<RuntimeAddNodeCuda12>(kRt, CUPTI_RUNTIME_TRACE_CBID_cudaGraphAddNode_v12020),
    MEMTRACE_ALLOC(kRt, CUPTI_RUNTIME_TRACE_CBID_cudaIpcOpenMemHandle_v4010, Api::kCudaIpcOpenMemHandle,
                   cudaIpcOpenMemHandle_v4010_params, record_opened(call, result, address_of(result, p.devPtr))),
    MEMTRACE_FREE(kRt, CUPTI_RUNTIME_TRACE_CBID_cudaIpcCloseMemHandle_v4010, Api::kCudaIpcCloseMemHandle,
                  cudaIpcCloseMemHandle_v4010_params,
                  free_entry(call, reinterpret_cast<uint64_t>(p.devPtr), 0, nullptr), Ordering::kImmediate, nullptr),
    MEMTRACE_ALLOC(kRt, CUPTI_RUNTIME_TRACE_CBID_cudaMemPoolImportPointer_v11020, Api::kCudaMemPoolImportPointer,
                   cudaMemPoolImportPointer_v11020_params,
                   (call.event.handle = reinterpret_cast<uint64_t>(p.memPool),
                    record_opened(call, result, address_of(result, p.ptr)))),
    // The driver.
    MEMTRACE_ALLOC(kDrv, CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, Api::kCuMemAlloc, cuMemAlloc_v2_params,
                   record_after(call, result, address_of(result, p.dptr), p.bytesize, ctx_device(call))),
    MEMTRACE_FREE(kDrv, CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2, Api::kCuMemFree, cuMemFree_v2_params,
                  free_entry(call, p.dptr, 0, nullptr), Ordering::kImmediate, nullptr),
    MEMTRACE_ALLOC(kDrv, CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync, Api::kCuMemAllocAsync, cuMemAllocAsync_params,
                   record_after(call, result, address_of(result, p.dptr), p.bytesize, pointer_or_ctx_device(call),
                                p.hStream, Ordering::kStream)),
    MEMTRACE_ALLOC(kDrv, CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz, Api::kCuMemAllocAsync, cuMemAllocAsync_params,
                   record_after(call, result, address_of(result, p.dptr), p.bytesize, pointer_or_ctx_device(call),
                                p.hStream, Ordering::kPerThreadStream)),
    MEMTRACE_FREE(kDrv, CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync, Api::kCuMemFreeAsync, cuMemFreeAsync_params,
                  free_entry(call, p.dptr, 0, p.hStream), Ordering::kStream, p.hStream),
    MEMTRACE_FREE(kDrv, CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz, Api::kCuMemFreeAsync, cuMemFreeAsync_params,
                  free_entry(call, p.dptr, 0, p.hStream), Ordering::kPerThreadStream, p.hStream),
    MEMTRACE_ALLOC(kDrv, CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync, Api::kCuMemAllocFromPoolAsync,
                   cuMemAllocFromPoolAsync_params,
                   (call.event.handle = reinterpret_cast<uint64_t>(p.pool),
                    record_after(call, result, address_of(result, p.dptr), p.bytesize, pointer_or_ctx_device(call),
                                 p.hStream, Ordering::kStream))),
    MEMTRACE_ALLOC(kDrv, CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz, Api::kCuMemAllocFromPoolAsync,
                   cuMemAllocFromPoolAsync_params,
                   (call.event.handle = reinterpret_cast<uint64_t>(p.pool),
                    record_after(call, result, address_of(result, p.dptr), p.bytesize, pointer_or_ctx_device(call),
                                 p.hStream, Ordering::kPerThreadStream))),
    MEMTRACE_ALLOC(kDrv, CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged, Api::kCuMemAllocManaged, cuMemAllocManaged_params,
                   record_after(call, result, address_of(result, p.dptr), p.bytesize, ctx_device(call))),
    MEMTRACE_ALLOC(kDrv, CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc, Api::kCuMemHostAlloc, cuMemHostAlloc_params,
                   record_after(call, result, address_of(result, p.pp), p.bytesize, no_device)),
    MEMTRACE_ALLOC(kDrv, CUPTI_DRIVER_TRACE_CBID_cuMemAllocHost_v2, Api::kCuMemAllocHost, cuMemAllocHost_v2_params,
                   record_after(call, result, address_of(result, p.pp), p.bytesize, no_device)),
    MEMTRACE_FREE(kDrv, CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost, Api::kCuMemFreeHost, cuMemFreeHost_params,
                  free_entry(call, reinterpret_cast<uint64_t>(p.p), 0, nullptr), Ordering::kImmediate, nullptr),
    MEMTRACE_ALLOC(
        kDrv, CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2, Api::kCuMemAllocPitch, cuMemAllocPitch_v2_params,
        record_after(call, result, address_of(result, p.dptr),
                     result == 0 && p.pPitch ? uint64_t(*p.pPitch) * p.Height : uint64_t(p.WidthInBytes) * p.Height,
                     ctx_device(call))),
    MEMTRACE_ALLOC(kDrv, CUPTI_DRIVER_TRACE_CBID_cuMemCreate, Api::kCuMemCreate, cuMemCreate_params,
                   record_after(call, result, result == 0 && p.handle ? uint64_t(*p.handle) : 0, p.size,
                                [&p] {
                                  return p.prop && p.prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE
                                             ? p.prop->location.id
                                             : -1;
                                })),
    MEMTRACE_FREE(kDrv, CUPTI_DRIVER_TRACE_CBID_cuMemRelease, Api::kCuMemRelease, cuMemRelease_params,
                  free_entry(call, p.handle, 0, nullptr), Ordering::kImmediate, nullptr),
    MEMTRACE_ALLOC(kDrv, CUPTI_DRIVER_TRACE_CBID_cuMemMap, Api::kCuMemMap, cuMemMap_params,
                   (call.event.handle = p.handle, record_after(call, result, p.ptr, p.size, no_device))),
    MEMTRACE_FREE(kDrv, CUPTI_DRIVER_TRACE_CBID_cuMemUnmap, Api::kCuMemUnmap, cuMemUnmap_params,
                  free_entry(call, p.ptr, p.size, nullptr), Ordering::kImmediate, nullptr),
    MEMTRACE_ALLOC(kDrv, CUPTI_DRIVER_TRACE_CBID_cuMemAddressReserve, Api::kCuMemAddressReserve,
                   cuMemAddressReserve_params,
                   record_after(call, result, address_of(result, p.ptr), p.size, no_device)),
    MEMTRACE_FREE(kDrv, CUPTI_DRIVER_TRACE_CBID_cuMemAddressFree, Api::kCuMemAddressFree, cuMemAddressFree_params,
                  free_entry(call, p.ptr, p.size, nullptr), Ordering::kImmediate, nullptr),
    MEMTRACE_ALLOC(kDrv, CUPTI_DRIVER_TRACE_CBID_cuGraphAddMemAllocNode, Api::kCuGraphAddMemAllocNode,
                   cuGraphAddMemAllocNode_params,
                   record_graph_node(call, result, p.nodeParams ? p.nodeParams->dptr : 0,
                                     p.nodeParams ? p.nodeParams->bytesize : 0, p.hGraph,
                                     p.nodeParams ? location_device(p.nodeParams->poolProps.location) : -1)),
    MEMTRACE_FREE(kDrv, CUPTI_DRIVER_TRACE_CBID_cuGraphAddMemFreeNode, Api::kCuGraphAddMemFreeNode,
                  cuGraphAddMemFreeNode_params, free_entry(call, p.dptr, 0, nullptr), Ordering::kImmediate, nullptr),
    generic_node<DriverAddNode>(kDrv, CUPTI_DRIVER_TRACE_CBID_cuGraphAddNode),
    generic_node<DriverAddNodeV2>(kDrv, CUPTI_DRIVER_TRACE_CBID_cuGraphAddNode_v2),
    MEMTRACE_ALLOC(kDrv, CUPTI_DRIVER_TRACE_CBID_cuIpcOpenMemHandle_v2, Api::kCuIpcOpenMemHandle,
                   cuIpcOpenMemHandle_v2_params, record_opened(call, result, address_of(result, p.pdptr))),
    MEMTRACE_ALLOC(kDrv, CUPTI_DRIVER_TRACE_CBID_cuIpcOpenMemHandle, Api::kCuIpcOpenMemHandle,
                   cuIpcOpenMemHandle_params, record_opened(call, result, address_of(result, p.pdptr))),
    MEMTRACE_FREE(kDrv, CUPTI_DRIVER_TRACE_CBID_cuIpcCloseMemHandle, Api::kCuIpcCloseMemHandle,
                  cuIpcCloseMemHandle_params, free_entry(call, p.dptr, 0, nullptr), Ordering::kImmediate, nullptr),
    MEMTRACE_ALLOC(kDrv, CUPTI_DRIVER_TRACE_CBID_cuMemPoolImportPointer, Api::kCuMemPoolImportPointer,
                   cuMemPoolImportPointer_params,
                   (call.event.handle = reinterpret_cast<uint64_t>(p.pool),
                    record_opened(call, result, address_of(result, p.ptr_out)))),
    MEMTRACE_ALLOC(kDrv, CUPTI_DRIVER_TRACE_CBID_cuMemImportFromShareableHandle, Api::kCuMemImportFromShareableHandle,
                   cuMemImportFromShareableHandle_params,
                   record_after(call, result, result == 0 && p.handle ? uint64_t(*p.handle) : 0, 0,
                                [&call, &p, result] {
                                  return result == 0 && p.handle ? handle_device(call.origin(), *p.handle) : -1;
                                })),
    MEMTRACE_ALLOC(kDrv, CUPTI_DRIVER_TRACE_CBID_cuMulticastCreate, Api::kCuMulticastCreate, cuMulticastCreate_params,
                   record_after(call, result, result == 0 && p.mcHandle ? uint64_t(*p.mcHandle) : 0,
                                p.prop ? p.prop->size : 0, no_device)),
};
#undef MEMTRACE_ALLOC
#undef MEMTRACE_FREE

// The per-thread-stream forms take the same parameters as the plain ones.
static_assert(sizeof(cudaMallocAsync_ptsz_v11020_params) == sizeof(cudaMallocAsync_v11020_params));
static_assert(sizeof(cudaFreeAsync_ptsz_v11020_params) == sizeof(cudaFreeAsync_v11020_params));
static_assert(sizeof(cudaMallocFromPoolAsync_ptsz_v11020_params) == sizeof(cudaMallocFromPoolAsync_v11020_params));
static_assert(sizeof(cuMemAllocAsync_ptsz_params) == sizeof(cuMemAllocAsync_params));
static_assert(sizeof(cuMemFreeAsync_ptsz_params) == sizeof(cuMemFreeAsync_params));
static_assert(sizeof(cuMemAllocFromPoolAsync_ptsz_params) == sizeof(cuMemAllocFromPoolAsync_params));

// The handlers by callback id, a table per domain: CUPTI calls back on every call of the program
// it reports (interposed ones too, under --backend auto), so finding the handler must cost nothing.
struct HandlerTables {
  const Handler* runtime[CUPTI_RUNTIME_TRACE_CBID_SIZE] = {};
  const Handler* driver[CUPTI_DRIVER_TRACE_CBID_SIZE] = {};
  HandlerTables() {
    for (const Handler& h : kHandlers) (h.domain == kRt ? runtime[h.cbid] : driver[h.cbid]) = &h;
  }
};
const HandlerTables g_handler_tables;  // filled when the library loads, before any callback

const Handler* handler_for(CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  if (domain == kRt) return cbid < std::size(g_handler_tables.runtime) ? g_handler_tables.runtime[cbid] : nullptr;
  if (domain == kDrv) return cbid < std::size(g_handler_tables.driver) ? g_handler_tables.driver[cbid] : nullptr;
  return nullptr;
}

// The calls CUPTI reported on this thread that have not exited: the outermost one records.
constexpr int kMaxPending = 8;
struct Pending {
  bool recording = false;
  alignas(Call) unsigned char storage[sizeof(Call)];
  Call* call() { return std::launder(reinterpret_cast<Call*>(storage)); }
};
// This thread's pending calls (thread_block: too large for static TLS when loaded late).
Pending* pending_calls() {
  return static_cast<Pending*>(thread_block(ThreadBlock::kCuptiPending, sizeof(Pending) * kMaxPending));
}

// A call CUPTI reported that no interposer holds: recorded when it is the outermost.
__attribute__((noinline)) void handle_callback(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* raw) {
  const auto* data = static_cast<const CUpti_CallbackData*>(raw);
  const Handler* h = handler_for(domain, cbid);
  if (!h || !data) return;
  const uint32_t generation = g_cupti_generation.load(std::memory_order_relaxed);
  if (t_cupti_generation != generation) {  // calls pending from before a hand-over never exit
    t_cupti_generation = generation;
    t_cupti_depth = 0;
  }
  int saved_errno = errno;
  if (data->callbackSite == CUPTI_API_ENTER) {
    int depth = t_cupti_depth++;
    Pending* pending = pending_calls();
    if (depth >= kMaxPending || !pending) return;
    Pending& slot = pending[depth];
    // An interposer (or a call further out) has it: nothing more to record.
    const Api api = h->api_for ? h->api_for(data->functionParams) : h->api;
    slot.recording = depth == 0 && !t_interposer_recording && api != Api::kUnknown;
    if (slot.recording) {
      Call* call = new (slot.storage) Call(api, Call::FromCupti{});
      if (h->at_entry && call->active()) h->at_entry(*call, data->functionParams);
    }
  } else if (t_cupti_depth > 0) {
    int depth = --t_cupti_depth;
    Pending* pending = pending_calls();
    if (depth >= kMaxPending || !pending) return;
    Pending& slot = pending[depth];
    if (slot.recording) {
      slot.recording = false;
      Call* call = slot.call();
      const int result = data->functionReturnValue ? *static_cast<const int*>(data->functionReturnValue) : 0;
      if (call->active()) h->at_exit(*call, data->functionParams, result);
      call->~Call();
    }
  }
  errno = saved_errno;
}

void CUPTIAPI on_callback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* raw) {
  // An interposer records this call, and every call made inside it (--backend auto): nothing to
  // do, on entry or exit alike (the flag holds from before CUPTI's entry to after its exit, and no
  // CUPTI call was pending when the interposer began: it records only outside them). Kept apart
  // from the rest, so that this path costs a few instructions.
  if (t_interposer_recording && t_cupti_depth == 0) return;
  handle_callback(domain, cbid, raw);
}

// CUPTI, found at run time: memtrace links no CUDA library.
struct Cupti {
  void* library = nullptr;
  decltype(&cuptiSubscribe) subscribe = nullptr;
  decltype(&cuptiSubscribe_v2) subscribe_v2 = nullptr;
  decltype(&cuptiUnsubscribe) unsubscribe = nullptr;
  decltype(&cuptiEnableCallback) enable_callback = nullptr;
  decltype(&cuptiGetResultString) result_string = nullptr;
  decltype(&cuptiGetVersion) get_version = nullptr;
};
Cupti g_cupti;
std::mutex g_cupti_mutex;  // start, hand-over
CUpti_SubscriberHandle g_subscriber = nullptr;
bool g_shares_cupti = false;  // memtrace's subscription lets others subscribe beside it
// Read and written without g_cupti_mutex: InitializeInjection runs inside the driver's cuInit,
// which a CUPTI call made under the mutex may be the one to make.
std::atomic<bool> g_driver_initialized{false};    // InitializeInjection came: CUPTI can reach the driver
std::atomic<bool> g_retry_at_driver_init{false};  // CUPTI took no subscriber yet: ask at InitializeInjection
pid_t g_cupti_pid = 0;                            // the process CUPTI was set up in (not a forked child)

void* open_cupti() {
  const char* named = setting(env::kCuptiLibrary);
  if (named && *named) return ::dlopen(named, RTLD_NOW | RTLD_LOCAL);
  for (const char* soname : {"libcupti.so.13", "libcupti.so.12"})
    if (void* l = ::dlopen(soname, RTLD_NOW | RTLD_LOCAL)) return l;
  // Where the toolkit keeps it, when nothing put it on the library path.
  std::string roots[] = {::secure_getenv("CUDA_HOME") ? ::secure_getenv("CUDA_HOME") : "", "/usr/local/cuda"};
  for (const std::string& root : roots) {
    if (root.empty()) continue;
    for (const char* dir : {"/lib64/", "/extras/CUPTI/lib64/"})
      for (const char* soname : {"libcupti.so.13", "libcupti.so.12"})
        if (void* l = ::dlopen((root + dir + soname).c_str(), RTLD_NOW | RTLD_LOCAL)) return l;
  }
  return nullptr;
}

template <typename Fn>
Fn symbol(void* library, const char* name) {
  return reinterpret_cast<Fn>(::dlsym(library, name));
}

std::string result_text(CUptiResult r) {
  const char* text = nullptr;
  if (g_cupti.result_string) g_cupti.result_string(r, &text);
  return text ? text : "CUPTI error " + std::to_string(static_cast<int>(r));
}

std::string* g_cupti_problem = new std::string();  // why CUPTI's callbacks are off, under g_cupti_mutex

// The interposers record from now on.
void fall_back(const std::string& why) {
  *g_cupti_problem = why.substr(0, why.find(':'));
  g_interposers_record.store(true, std::memory_order_relaxed);
  if (session_active()) publish_notice(why);
}

// --verify: CUPTI's memory activity records, collected beside the callbacks and handed to the
// collector as observations (cupti.memory_alloc/free) when CUPTI flushes them: at exit, or before
// CUPTI is handed to another tool.
struct Activity {
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
  decltype(&cuptiActivityEnable) enable = nullptr;
  decltype(&cuptiActivityDisable) disable = nullptr;
  decltype(&cuptiActivityFlushAll) flush = nullptr;
  decltype(&cuptiActivityGetNextRecord) next_record = nullptr;
  bool on = false;
};
Activity g_activity;
constexpr size_t kActivityBufferBytes = 1 << 20;

bool verify_requested() {
  const char* v = setting(env::kVerify);
  return v && std::strcmp(v, "1") == 0;
}

MemKind kind_of(CUpti_ActivityMemoryKind kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_MEMORY_KIND_DEVICE: return MemKind::kDevice;
    case CUPTI_ACTIVITY_MEMORY_KIND_MANAGED: return MemKind::kManaged;
    case CUPTI_ACTIVITY_MEMORY_KIND_PINNED: return MemKind::kPinnedHost;
    default: return MemKind::kUnknown;
  }
}

void CUPTIAPI activity_buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kActivityBufferBytes));
  *size = *buffer ? kActivityBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI activity_buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  while (g_activity.next_record && g_activity.next_record(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_MEMORY2) continue;
    const auto* m = reinterpret_cast<const CUpti_ActivityMemory4*>(record);
    Event e;
    e.api = m->memoryOperationType == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE ? Api::kCuptiMemoryFree
                                                                                   : Api::kCuptiMemoryAlloc;
    e.kind = kind_of(m->memoryKind);
    e.layer = Layer::kUnknown;
    e.addr = m->address;
    e.size = m->bytes;
    e.device = e.kind == MemKind::kPinnedHost ? -1 : static_cast<int32_t>(m->deviceId);
    e.flags = kEventFromCupti;
    if (session_active()) publish(e, stamp(e), nullptr);
  }
  std::free(buffer);
}

void flush_activity() {
  if (g_activity.on && g_cupti_pid == ::getpid()) g_activity.flush(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
}

void start_activity() {
  void* l = g_cupti.library;
  g_activity.register_callbacks = symbol<decltype(g_activity.register_callbacks)>(l, "cuptiActivityRegisterCallbacks");
  g_activity.enable = symbol<decltype(g_activity.enable)>(l, "cuptiActivityEnable");
  g_activity.disable = symbol<decltype(g_activity.disable)>(l, "cuptiActivityDisable");
  g_activity.flush = symbol<decltype(g_activity.flush)>(l, "cuptiActivityFlushAll");
  g_activity.next_record = symbol<decltype(g_activity.next_record)>(l, "cuptiActivityGetNextRecord");
  if (!g_activity.register_callbacks || !g_activity.enable || !g_activity.flush || !g_activity.next_record ||
      g_activity.register_callbacks(activity_buffer_requested, activity_buffer_completed) != CUPTI_SUCCESS ||
      g_activity.enable(CUPTI_ACTIVITY_KIND_MEMORY2) != CUPTI_SUCCESS) {
    publish_notice("--verify: CUPTI keeps no memory activity records here: nothing to compare with");
    return;
  }
  g_activity.enable(CUPTI_ACTIVITY_KIND_MEMORY_POOL);  // pools' own records, where CUPTI has them
  g_activity.on = true;
  std::atexit(flush_activity);
}

// Hands every record so far over and stops collecting: CUPTI goes to another tool.
void stop_activity() {
  if (!g_activity.on) return;
  flush_activity();
  if (g_activity.disable) {
    g_activity.disable(CUPTI_ACTIVITY_KIND_MEMORY2);
    g_activity.disable(CUPTI_ACTIVITY_KIND_MEMORY_POOL);
  }
  g_activity.on = false;
  publish_notice("--verify: CUPTI's memory records stop where another tool took CUPTI over");
}

// Subscribes and enables the callbacks; under g_cupti_mutex.
void subscribe() {
  g_cupti.library = open_cupti();
  if (!g_cupti.library) {
    fall_back("no CUPTI library (libcupti.so.13 or .12) could be loaded: recorded through memtrace's interposers");
    return;
  }
  g_cupti.subscribe = symbol<decltype(g_cupti.subscribe)>(g_cupti.library, "cuptiSubscribe");
  g_cupti.subscribe_v2 = symbol<decltype(g_cupti.subscribe_v2)>(g_cupti.library, "cuptiSubscribe_v2");
  g_cupti.unsubscribe = symbol<decltype(g_cupti.unsubscribe)>(g_cupti.library, "cuptiUnsubscribe");
  g_cupti.enable_callback = symbol<decltype(g_cupti.enable_callback)>(g_cupti.library, "cuptiEnableCallback");
  g_cupti.result_string = symbol<decltype(g_cupti.result_string)>(g_cupti.library, "cuptiGetResultString");
  g_cupti.get_version = symbol<decltype(g_cupti.get_version)>(g_cupti.library, "cuptiGetVersion");
  if ((!g_cupti.subscribe && !g_cupti.subscribe_v2) || !g_cupti.unsubscribe || !g_cupti.enable_callback) {
    fall_back("the CUPTI library lacks the callback API: recorded through memtrace's interposers");
    return;
  }
  if (backend() == Backend::kPreload) {  // --verify alone: CUPTI's records, no callbacks
    g_cupti_pid = ::getpid();
    if (session_active()) start_activity();
    return;
  }
  // Several subscribers where this CUPTI takes them (its version says so at run time).
  uint32_t version = 0;
  if (g_cupti.get_version) g_cupti.get_version(&version);
  bool ask_for_several = g_cupti.subscribe_v2 && version >= cupti::kMultipleSubscribersVersion;
  CUptiResult r;
  char holder[256] = "";
  for (int tries = 0;; ++tries) {
    *holder = '\0';
    if (g_cupti.subscribe_v2) {
      cupti::SubscriberParams params{};
      params.base.structSize = ask_for_several ? sizeof params : CUpti_SubscriberParams_STRUCT_SIZE;
      params.base.subscriberName = "memtrace";
      params.base.oldSubscriberName = holder;
      params.base.oldSubscriberSize = sizeof holder;
      params.allowMultipleSubscribers = ask_for_several ? 1 : 0;
      r = g_cupti.subscribe_v2(&g_subscriber, on_callback, nullptr, &params.base);
    } else {
      r = g_cupti.subscribe(&g_subscriber, on_callback, nullptr);
    }
    if (tries > 0) break;
    // Several refused with no subscriber named: this CUPTI cannot give them here (a driver older
    // than r610). One subscriber, then, as before CUPTI 13.3.
    if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED && ask_for_several && !*holder) {
      ask_for_several = false;
      continue;
    }
    if (r != CUPTI_ERROR_NOT_INITIALIZED || g_driver_initialized.load()) break;
    // Too early for CUPTI: the interposers record until the driver loads memtrace, which asks
    // again. Unless it came while this one asked: then ask again now.
    g_retry_at_driver_init.store(true);
    if (!g_driver_initialized.load() || !g_retry_at_driver_init.exchange(false)) {
      g_subscriber = nullptr;
      return;
    }
  }
  if (r != CUPTI_SUCCESS) {
    g_subscriber = nullptr;
    std::string who = *holder ? std::string(holder) : "another tool";
    fall_back(r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
                  ? "CUPTI is held by " + who + " (one subscriber per process): recorded through memtrace's interposers"
                  : "CUPTI refused a subscriber (" + result_text(r) + "): recorded through memtrace's interposers");
    return;
  }
  g_shares_cupti = ask_for_several;
  for (const Handler& h : kHandlers) g_cupti.enable_callback(1, g_subscriber, h.domain, h.cbid);
  g_cupti_pid = ::getpid();
  if (verify_requested() && session_active()) start_activity();
  if (backend() == Backend::kCupti) g_interposers_record.store(false, std::memory_order_relaxed);
}

// A forked child has the parent's subscription in memory but no CUDA of its own: its interposers
// record, and CUPTI is never touched again there.
void forget_cupti_in_child() {
  new (&g_cupti_mutex) std::mutex;  // a parent thread may have been handing CUPTI over at the fork
  g_activity.on = false;
  g_subscriber = nullptr;
  g_retry_at_driver_init.store(false);
  g_cupti_pid = 0;
  g_interposers_record.store(true, std::memory_order_relaxed);
  g_cupti_generation.fetch_add(1, std::memory_order_relaxed);
}
__attribute__((constructor)) void install_cupti_fork_handler() {
  ::pthread_atfork(nullptr, nullptr, forget_cupti_in_child);
}

}  // namespace

// Subscribed once a session; memtrace.stop and memtrace detach let go, and a later attach subscribes again.
std::atomic<bool> g_cupti_started{false};

void start_cupti() {
  if (secure_program()) return;  // nothing loaded into a set-user-ID program
  if (backend() == Backend::kPreload && !verify_requested()) return;
  if (g_cupti_started.exchange(true)) return;
  std::lock_guard lock(g_cupti_mutex);
  g_retry_at_driver_init.store(false);
  subscribe();
}

// The driver initialized and loaded memtrace: CUPTI can take a subscriber now, if it could not
// before. Takes no lock of its own (see g_driver_initialized).
void start_cupti_with_driver() {
  g_driver_initialized.store(true);
  if (g_retry_at_driver_init.exchange(false)) g_cupti_started.store(false);
  start_cupti();
}

bool cupti_subscribed(std::string& why_not) {
  std::lock_guard lock(g_cupti_mutex);
  why_not = g_subscriber                    ? std::string()
            : g_retry_at_driver_init.load() ? "CUPTI takes no subscriber until the driver initialized"
            : g_cupti_problem->empty()      ? "CUPTI was not started"
                                            : *g_cupti_problem;
  return g_subscriber != nullptr;
}

void stop_cupti() {
  std::lock_guard lock(g_cupti_mutex);
  g_retry_at_driver_init.store(false);                          // a later session asks again
  if (g_cupti_pid == ::getpid()) g_cupti_started.store(false);  // a later session tries again, even after a failure
  if (g_cupti_pid != ::getpid() || !g_subscriber) return;
  stop_activity();
  g_cupti.unsubscribe(g_subscriber);
  g_subscriber = nullptr;
  g_cupti_generation.fetch_add(1, std::memory_order_relaxed);
}

// Another tool asks CUPTI for its subscription: memtrace lets go of its own first, so that the
// tool works as it would alone; unless memtrace's lets others beside it and the tool asks for that
// too (SHARES), when both keep CUPTI.
void hand_cupti_over(bool shares) {
  std::lock_guard lock(g_cupti_mutex);
  if (g_cupti_pid != ::getpid()) return;
  if (shares && g_subscriber && g_shares_cupti) return;
  stop_activity();
  if (!g_subscriber) return;
  g_cupti.unsubscribe(g_subscriber);
  g_subscriber = nullptr;
  g_cupti_generation.fetch_add(1, std::memory_order_relaxed);
  fall_back("another tool subscribed to CUPTI: memtrace let go of it and records through its interposers");
}

}  // namespace memtrace::inject

using namespace memtrace::inject;

// The driver calls this on its first cuInit when CUDA_INJECTION64_PATH names the injector.
MEMTRACE_EXPORT int InitializeInjection() {
  start_cupti_with_driver();
  return 1;
}

// The program's own CUPTI subscriptions (PyTorch's profiler, Nsight's injection, a tool of its
// own) go to CUPTI as they would, once memtrace has let go of it.
namespace {
// The CUPTI the program linked (the global scope after memtrace), else the one it or memtrace
// loaded.
template <typename Fn>
Fn real_cupti(const char* name) {
  void* fn = ::dlsym(RTLD_NEXT, name);
  for (const char* soname : {"libcupti.so.13", "libcupti.so.12"}) {
    if (fn) break;
    void* library = ::dlopen(soname, RTLD_NOW | RTLD_NOLOAD);
    if (library) fn = ::dlsym(library, name);
  }
  if (!fn && g_cupti.library) fn = ::dlsym(g_cupti.library, name);
  return reinterpret_cast<Fn>(fn);
}
}  // namespace

MEMTRACE_EXPORT CUptiResult cuptiSubscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback,
                                           void* userdata) {
  hand_cupti_over(false);
  auto real = real_cupti<decltype(&cuptiSubscribe)>("cuptiSubscribe");
  return real ? real(subscriber, callback, userdata) : CUPTI_ERROR_NOT_INITIALIZED;
}

MEMTRACE_EXPORT CUptiResult cuptiSubscribe_v2(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback,
                                              void* userdata, CUpti_SubscriberParams* params) {
  hand_cupti_over(memtrace::cupti::asks_for_several(params));
  auto real = real_cupti<decltype(&cuptiSubscribe_v2)>("cuptiSubscribe_v2");
  return real ? real(subscriber, callback, userdata, params) : CUPTI_ERROR_NOT_INITIALIZED;
}
