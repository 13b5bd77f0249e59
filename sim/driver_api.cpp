// The driver API of the simulated device (libcuda.so.1): the allocation-related subset, device
// and context basics, and cuGetProcAddress, with the driver's real error codes.
#include <cuda.h>
#include <cupti.h>
#include <dlfcn.h>
#include <pthread.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "api_callbacks.h"
#include "device_model.h"
#include "driver_objects.h"
#include "driver_requests.h"
#include "ledger.h"

#undef cuDevicePrimaryCtxRelease
#undef cuDevicePrimaryCtxReset

extern "C" {
CUresult cuDevicePrimaryCtxRelease(CUdevice dev);
CUresult cuDevicePrimaryCtxReset(CUdevice dev);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream hStream);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream);
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream);
CUresult cuStreamBeginCapture_v2_ptsz(CUstream stream, CUstreamCaptureMode mode);
CUresult cuStreamEndCapture_ptsz(CUstream stream, CUgraph* graph);
CUresult cuStreamIsCapturing_ptsz(CUstream stream, CUstreamCaptureStatus* status);
}

namespace {

std::atomic<bool> g_initialized{false};
thread_local std::vector<CUcontext> t_context_stack;  // back() is current

CUctx_st g_primary[64];
// Retains of each primary context not yet released: it is active while any remain (CUDA Driver
// API, cuda.h 13.0, cuDevicePrimaryCtxRetain/Release/GetState). The runtime retains it on its
// first call that needs a context and never releases it while the process runs.
std::atomic<int> g_primary_retains[64];
CUmemPoolHandle_st g_default_pool[64];

constexpr int kDriverApi = CUPTI_CB_DOMAIN_DRIVER_API;

CUcontext current_context() { return t_context_stack.empty() ? nullptr : t_context_stack.back(); }

// Stream capture (CUDA graphs): whether a stream is capturing, and the graph it builds. The legacy
// stream cannot capture; the per-thread default stream is one per thread.
thread_local CUstreamCaptureStatus t_per_thread_capture = CU_STREAM_CAPTURE_STATUS_NONE;
thread_local CUgraph t_per_thread_graph = nullptr;

CUstream capturable(CUstream stream, bool per_thread) {
  if (!stream) stream = per_thread ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
  return stream == CU_STREAM_LEGACY ? nullptr : stream;
}
CUstreamCaptureStatus* capture_of(CUstream stream, bool per_thread) {
  stream = capturable(stream, per_thread);
  if (!stream) return nullptr;
  return stream == CU_STREAM_PER_THREAD ? &t_per_thread_capture : &stream->capture;
}
CUgraph* capture_graph_of(CUstream stream, bool per_thread) {
  stream = capturable(stream, per_thread);
  if (!stream) return nullptr;
  return stream == CU_STREAM_PER_THREAD ? &t_per_thread_graph : &stream->capture_graph;
}

}  // namespace

namespace sim_driver {

bool initialized() { return g_initialized.load(); }

CUresult to_result(sim::Status status) {
  switch (status) {
    case sim::Status::kOk: return CUDA_SUCCESS;
    case sim::Status::kOutOfMemory: return CUDA_ERROR_OUT_OF_MEMORY;
    case sim::Status::kInvalidDevice: return CUDA_ERROR_INVALID_DEVICE;
    case sim::Status::kNotFound: return CUDA_ERROR_NOT_FOUND;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
}

// The device an allocation goes to: the current context's, as on a GPU.
CUresult context_device(int* device) {
  if (!g_initialized.load()) return CUDA_ERROR_NOT_INITIALIZED;
  CUcontext ctx = current_context();
  if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
  *device = ctx->device;
  return CUDA_SUCCESS;
}

CUgraph capture_graph(CUstream stream, bool per_thread) {
  CUgraph* graph = capture_graph_of(stream, per_thread);
  return graph ? *graph : nullptr;
}

}  // namespace sim_driver

namespace {

using sim_driver::context_device;
using sim_driver::to_result;

CUresult stream_device(CUstream stream, int* device) {
  CUresult r = context_device(device);
  if (r == CUDA_SUCCESS && stream && stream != CU_STREAM_LEGACY && stream != CU_STREAM_PER_THREAD)
    *device = stream->device;
  return r;
}

CUresult begin_capture(CUstream stream, bool per_thread) {
  if (!g_initialized.load()) return CUDA_ERROR_NOT_INITIALIZED;
  CUstreamCaptureStatus* status = capture_of(stream, per_thread);
  if (!status) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (*status != CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_ERROR_ILLEGAL_STATE;
  *status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  *capture_graph_of(stream, per_thread) = new CUgraph_st;
  return CUDA_SUCCESS;
}

CUresult end_capture(CUstream stream, CUgraph* graph, bool per_thread) {
  if (!graph) return CUDA_ERROR_INVALID_VALUE;
  CUstreamCaptureStatus* status = capture_of(stream, per_thread);
  if (!status || *status == CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_ERROR_ILLEGAL_STATE;
  *status = CU_STREAM_CAPTURE_STATUS_NONE;
  CUgraph* captured = capture_graph_of(stream, per_thread);
  *graph = *captured;
  *captured = nullptr;
  return CUDA_SUCCESS;
}

CUresult is_capturing(CUstream stream, CUstreamCaptureStatus* out, bool per_thread) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  CUstreamCaptureStatus* status = capture_of(stream, per_thread);
  *out = status ? *status : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}

CUresult allocate_on(sim::Memory memory, int device, size_t size, uint64_t* addr) {
  if (size == 0) return CUDA_ERROR_INVALID_VALUE;
  return to_result(sim::allocate(memory, device, size, addr));
}

CUresult alloc_on_context(const char* api, sim::Memory memory, CUdeviceptr* dptr, size_t size) {
  sim::ApiCall call(api);
  if (!dptr) return call.done(CUDA_ERROR_INVALID_VALUE);
  int device;
  CUresult r = context_device(&device);
  uint64_t addr = 0;
  if (r == CUDA_SUCCESS) r = allocate_on(memory, device, size, &addr);
  if (r == CUDA_SUCCESS) *dptr = addr;
  return call.done(r, size);
}

CUresult alloc_host(const char* api, void** pp, size_t size) {
  sim::ApiCall call(api);
  if (!pp) return call.done(CUDA_ERROR_INVALID_VALUE);
  if (!g_initialized.load()) return call.done(CUDA_ERROR_NOT_INITIALIZED);
  uint64_t addr = 0;
  CUresult r = allocate_on(sim::Memory::kPinnedHost, -1, size, &addr);
  if (r == CUDA_SUCCESS) *pp = reinterpret_cast<void*>(addr);
  return call.done(r, size);
}

CUresult free_memory(const char* api, uint64_t addr, bool host) {
  sim::ApiCall call(api);
  if (!g_initialized.load()) return call.done(CUDA_ERROR_NOT_INITIALIZED);
  uint64_t size = 0;
  CUresult r = to_result(sim::release(addr, host, &size));  // sets size: call before reading it
  return call.done(r, size);
}

// Stream-ordered memory, by device: what the pools handed out, and (MEMTRACE_SIM_POOL_HOLDS=1)
// what they kept once freed, as a real pool keeps freed memory (its release threshold): reused by
// an allocation of the same size, given back by cuMemPoolTrimTo. Kept memory stays in use on the
// device.
// A pool keeps freed memory too when its release threshold says so (cuMemPoolSetAttribute
// CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: "amount of reserved memory in bytes to hold onto before
// trying to release memory back to the OS", cuda.h), as PyTorch's cudaMallocAsync backend sets it
// (UINT64_MAX). Its high-water marks are CU_MEMPOOL_ATTR_{USED,RESERVED}_MEM_HIGH.
struct Pools {
  std::mutex mutex;
  std::map<uint64_t, std::pair<int, uint64_t>> in_use;     // address -> device, size
  std::multimap<std::pair<int, uint64_t>, uint64_t> kept;  // (device, size) -> address
  std::map<int, uint64_t> release_threshold, used_high, reserved_high;
};
Pools& pools() {
  static Pools* p = new Pools;
  return *p;
}
// A forked child starts with a fresh device (device_model.cpp): its pools hold nothing of its
// parent's, and their lock is free (a parent thread asking the pool's use at the fork held it,
// and the child's first sample of the device waited forever). With a real driver, CUDA used in a
// forked child before exec is undefined (NVIDIA's CUDA C++ Guidelines 3.0.1, rule CUDA-1.6): the
// simulated device, a test instrument, gives the child a device of its own and never hangs it.
void reset_pools_after_fork() {
  Pools& p = pools();
  new (&p.mutex) std::mutex;
  p.in_use.clear();
  p.kept.clear();
  p.release_threshold.clear();
  p.used_high.clear();
  p.reserved_high.clear();
}
__attribute__((constructor)) void install_pools_fork_handler() {
  ::pthread_atfork(nullptr, nullptr, reset_pools_after_fork);
}
// With the pools' mutex held.
bool pools_keep_freed_memory(int device) {
  static const bool keep = [] {
    const char* v = ::secure_getenv("MEMTRACE_SIM_POOL_HOLDS");
    return v && std::strcmp(v, "1") == 0;
  }();
  return keep || pools().release_threshold[device] > 0;
}
uint64_t pool_bytes_locked(int device, bool kept) {
  Pools& p = pools();
  uint64_t bytes = 0;
  if (kept) {
    for (const auto& [key, addr] : p.kept)
      if (key.first == device) bytes += key.second;
  } else {
    for (const auto& [addr, use] : p.in_use)
      if (use.first == device) bytes += use.second;
  }
  return bytes;
}
uint64_t pool_bytes(int device, bool kept) {
  std::lock_guard lock(pools().mutex);
  return pool_bytes_locked(device, kept);
}

// A stream-ordered allocation; while STREAM is being captured, an allocation node of its graph.
CUresult alloc_stream_ordered(const char* api, CUdeviceptr* dptr, size_t size, int device, CUresult status,
                              CUstream stream, bool per_thread) {
  sim::ApiCall call(api);
  if (!dptr) return call.done(CUDA_ERROR_INVALID_VALUE);
  if (status == CUDA_SUCCESS)
    if (CUgraph graph = sim_driver::capture_graph(stream, per_thread))
      return call.done(sim_driver::add_alloc_node(graph, sim_driver::device_pool_params(device, size), dptr, nullptr),
                       size);
  uint64_t addr = 0;
  if (status == CUDA_SUCCESS) {
    Pools& p = pools();
    std::unique_lock lock(p.mutex);
    if (auto kept = p.kept.find({device, size}); kept != p.kept.end()) {
      addr = kept->second;
      p.kept.erase(kept);
    } else {
      lock.unlock();
      status = allocate_on(sim::Memory::kDevice, device, size, &addr);
      lock.lock();
    }
    if (status == CUDA_SUCCESS) {
      p.in_use[addr] = {device, size};
      uint64_t used = pool_bytes_locked(device, false), kept = pool_bytes_locked(device, true);
      p.used_high[device] = std::max(p.used_high[device], used);
      p.reserved_high[device] = std::max(p.reserved_high[device], used + kept);
    }
  }
  if (status == CUDA_SUCCESS) *dptr = addr;
  return call.done(status, size);
}

CUresult free_stream_ordered(const char* api, CUdeviceptr dptr, CUstream stream, bool per_thread) {
  if (CUgraph graph = sim_driver::capture_graph(stream, per_thread)) {
    sim::ApiCall call(api);
    uint64_t size = 0;
    CUresult r = sim_driver::add_free_node(graph, dptr, nullptr, &size);
    return call.done(r, size);
  }
  std::unique_lock pools_lock(pools().mutex);
  auto owner = pools().in_use.find(dptr);
  if (owner == pools().in_use.end() || !pools_keep_freed_memory(owner->second.first)) {
    if (owner != pools().in_use.end()) pools().in_use.erase(owner);
    pools_lock.unlock();
  } else {
    pools_lock.unlock();
    sim::ApiCall call(api);
    Pools& p = pools();
    std::lock_guard lock(p.mutex);
    auto it = p.in_use.find(dptr);
    if (it == p.in_use.end()) return call.done(CUDA_ERROR_INVALID_VALUE);
    const auto [device, size] = it->second;
    p.in_use.erase(it);
    p.kept.emplace(std::pair{device, size}, dptr);
    return call.done(CUDA_SUCCESS, size);
  }
  return free_memory(api, dptr, false);
}

// As NVIDIA's driver does on its first cuInit: the library CUDA_INJECTION64_PATH names (a profiler,
// memtrace) is loaded and its InitializeInjection called, once.
void load_injection_library() {
  const char* path = ::secure_getenv("CUDA_INJECTION64_PATH");
  if (!path || !*path) return;
  void* library = ::dlopen(path, RTLD_NOW);
  auto initialize = library ? reinterpret_cast<int (*)()>(::dlsym(library, "InitializeInjection")) : nullptr;
  if (initialize) initialize();
}

CUresult alloc_from_pool(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream stream, bool per_thread) {
  CUresult r = g_initialized.load() ? (pool ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE) : CUDA_ERROR_NOT_INITIALIZED;
  return alloc_stream_ordered("cuMemAllocFromPoolAsync", dptr, bytesize, pool ? pool->device : -1, r, stream,
                              per_thread);
}

}  // namespace

extern "C" {

CUresult cuInit(unsigned int flags) {
  sim::log_call("cuInit");
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  static std::once_flag once;
  std::call_once(once, [] {
    for (int d = 0; d < 64; ++d) g_primary[d] = CUctx_st{d, true}, g_default_pool[d] = CUmemPoolHandle_st{d};
    g_initialized.store(true);
    load_injection_library();
  });
  return sim::device_count() > 0 ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

// MEMTRACE_SIM_DRIVER_VERSION=N: the CUDA version the driver says it supports (default: the
// toolkit's), for the tests of what depends on it (CUPTI 13.3's several subscribers).
CUresult cuDriverGetVersion(int* version) {
  if (!version) return CUDA_ERROR_INVALID_VALUE;
  static const int v = [] {
    const char* text = ::secure_getenv("MEMTRACE_SIM_DRIVER_VERSION");
    return text && *text ? std::atoi(text) : CUDA_VERSION;
  }();
  *version = v;
  return CUDA_SUCCESS;
}

// MEMTRACE_SIM_DEVICE_COUNT_FAILURES=N: the first N calls fail as a driver not ready yet would
// (a fault for tests: a tool must ask again later, not give up).
std::atomic<long> g_count_failures{-1};

CUresult cuDeviceGetCount(int* count) {
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  if (!g_initialized.load()) return CUDA_ERROR_NOT_INITIALIZED;
  if (g_count_failures.load() < 0) {
    const char* n = ::secure_getenv("MEMTRACE_SIM_DEVICE_COUNT_FAILURES");
    long expected = -1;
    g_count_failures.compare_exchange_strong(expected, n ? std::atol(n) : 0);
  }
  if (g_count_failures.fetch_sub(1) > 0) return CUDA_ERROR_NOT_INITIALIZED;
  g_count_failures.store(0);
  *count = sim::device_count();
  return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  if (!g_initialized.load()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!sim::valid_device(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!sim::valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::string text = "memtrace simulated GPU " + std::to_string(dev);
  std::strncpy(name, text.c_str(), static_cast<size_t>(len));
  name[len - 1] = '\0';
  return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  if (!sim::valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = sim::device_capacity();
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int* value, CUdevice_attribute attrib, CUdevice dev) {
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  if (!sim::valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *value = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *value = 0; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *value = 132; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT: *value = static_cast<int>(sim::kPitchAlignment); break;
    default: *value = 0;
  }
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  if (!g_initialized.load()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!sim::valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *pctx = &g_primary[dev];
  g_primary_retains[dev].fetch_add(1);
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  if (!sim::valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  int retains = g_primary_retains[dev].load();
  while (retains > 0 && !g_primary_retains[dev].compare_exchange_weak(retains, retains - 1)) {
  }
  return CUDA_SUCCESS;
}

// Flags are the ones cuDevicePrimaryCtxSetFlags would set: none here.
CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  if (!flags || !active) return CUDA_ERROR_INVALID_VALUE;
  if (!g_initialized.load()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!sim::valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *flags = 0;
  *active = g_primary_retains[dev].load() > 0 ? 1 : 0;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  if (!sim::valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  sim::reset_device(dev);
  return CUDA_SUCCESS;
}

// The CUDA 7 ABIs of both, which NVIDIA's runtime 13.0 still asks for (at 7000): the same here.
CUresult cuDevicePrimaryCtxRelease(CUdevice dev) { return cuDevicePrimaryCtxRelease_v2(dev); }
CUresult cuDevicePrimaryCtxReset(CUdevice dev) { return cuDevicePrimaryCtxReset_v2(dev); }

CUresult cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams*, unsigned int, CUdevice dev) {
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  if (!g_initialized.load()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!sim::valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *pctx = new CUctx_st{dev, false};
  t_context_stack.push_back(*pctx);
  return CUDA_SUCCESS;
}

CUresult cuCtxDestroy_v2(CUcontext ctx) {
  if (!ctx) return CUDA_ERROR_INVALID_VALUE;
  for (auto it = t_context_stack.begin(); it != t_context_stack.end();)
    it = *it == ctx ? t_context_stack.erase(it) : it + 1;
  if (!ctx->primary) delete ctx;
  return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext ctx) {
  if (!g_initialized.load()) return CUDA_ERROR_NOT_INITIALIZED;
  if (t_context_stack.empty()) {
    if (ctx) t_context_stack.push_back(ctx);
  } else if (ctx) {
    t_context_stack.back() = ctx;
  } else {
    t_context_stack.pop_back();
  }
  return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext* pctx) {
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  if (!g_initialized.load()) return CUDA_ERROR_NOT_INITIALIZED;
  *pctx = current_context();
  return CUDA_SUCCESS;
}

CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  if (!ctx) return CUDA_ERROR_INVALID_VALUE;
  t_context_stack.push_back(ctx);
  return CUDA_SUCCESS;
}

CUresult cuCtxPopCurrent_v2(CUcontext* pctx) {
  if (t_context_stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx) *pctx = t_context_stack.back();
  t_context_stack.pop_back();
  return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice* device) {
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  int d;
  CUresult r = context_device(&d);
  if (r == CUDA_SUCCESS) *device = d;
  return r;
}

CUresult cuCtxSynchronize(void) { return current_context() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT; }

CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total_bytes) {
  if (!free_bytes || !total_bytes) return CUDA_ERROR_INVALID_VALUE;
  int device;
  CUresult r = context_device(&device);
  if (r != CUDA_SUCCESS) return r;
  uint64_t f, t;
  sim::memory_info(device, &f, &t);
  *free_bytes = f;
  *total_bytes = t;
  return CUDA_SUCCESS;
}

CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  return sim::traced(kDriverApi, CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, "cuMemAlloc_v2",
                     cuMemAlloc_v2_params{dptr, bytesize},
                     [&] { return alloc_on_context("cuMemAlloc", sim::Memory::kDevice, dptr, bytesize); });
}

CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  return sim::traced(kDriverApi, CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged, "cuMemAllocManaged",
                     cuMemAllocManaged_params{dptr, bytesize, flags},
                     [&] { return alloc_on_context("cuMemAllocManaged", sim::Memory::kManaged, dptr, bytesize); });
}

CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pPitch, size_t width, size_t height, unsigned int element) {
  return sim::traced(kDriverApi, CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2, "cuMemAllocPitch_v2",
                     cuMemAllocPitch_v2_params{dptr, pPitch, width, height, element}, [&] {
                       sim::ApiCall call("cuMemAllocPitch");
                       if (!dptr || !pPitch || (element != 4 && element != 8 && element != 16))
                         return call.done(CUDA_ERROR_INVALID_VALUE);
                       size_t pitch = (width + sim::kPitchAlignment - 1) / sim::kPitchAlignment * sim::kPitchAlignment;
                       int device;
                       CUresult r = context_device(&device);
                       uint64_t addr = 0;
                       if (r == CUDA_SUCCESS) r = allocate_on(sim::Memory::kDevice, device, pitch * height, &addr);
                       if (r == CUDA_SUCCESS) *dptr = addr, *pPitch = pitch;
                       return call.done(r, pitch * height);
                     });
}

CUresult cuMemFree_v2(CUdeviceptr dptr) {
  return sim::traced(kDriverApi, CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2, "cuMemFree_v2", cuMemFree_v2_params{dptr},
                     [&] { return free_memory("cuMemFree", dptr, false); });
}

CUresult cuMemAllocHost_v2(void** pp, size_t bytesize) {
  return sim::traced(kDriverApi, CUPTI_DRIVER_TRACE_CBID_cuMemAllocHost_v2, "cuMemAllocHost_v2",
                     cuMemAllocHost_v2_params{pp, bytesize},
                     [&] { return alloc_host("cuMemAllocHost", pp, bytesize); });
}

CUresult cuMemHostAlloc(void** pp, size_t bytesize, unsigned int flags) {
  return sim::traced(kDriverApi, CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc, "cuMemHostAlloc",
                     cuMemHostAlloc_params{pp, bytesize, flags},
                     [&] { return alloc_host("cuMemHostAlloc", pp, bytesize); });
}

CUresult cuMemFreeHost(void* p) {
  return sim::traced(kDriverApi, CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost, "cuMemFreeHost", cuMemFreeHost_params{p},
                     [&] { return free_memory("cuMemFreeHost", reinterpret_cast<uint64_t>(p), true); });
}

CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream stream) {
  return sim::traced(kDriverApi, CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync, "cuMemAllocAsync",
                     cuMemAllocAsync_params{dptr, bytesize, stream}, [&] {
                       int device = -1;
                       CUresult r = stream_device(stream, &device);
                       return alloc_stream_ordered("cuMemAllocAsync", dptr, bytesize, device, r, stream, false);
                     });
}

CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream stream) {
  return sim::traced(kDriverApi, CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz, "cuMemAllocAsync_ptsz",
                     cuMemAllocAsync_ptsz_params{dptr, bytesize, stream}, [&] {
                       int device = -1;
                       CUresult r = stream_device(stream, &device);
                       return alloc_stream_ordered("cuMemAllocAsync", dptr, bytesize, device, r, stream, true);
                     });
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream stream) {
  return sim::traced(kDriverApi, CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync",
                     cuMemAllocFromPoolAsync_params{dptr, bytesize, pool, stream},
                     [&] { return alloc_from_pool(dptr, bytesize, pool, stream, false); });
}

CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream stream) {
  return sim::traced(kDriverApi, CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz, "cuMemAllocFromPoolAsync_ptsz",
                     cuMemAllocFromPoolAsync_ptsz_params{dptr, bytesize, pool, stream},
                     [&] { return alloc_from_pool(dptr, bytesize, pool, stream, true); });
}

CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream) {
  return sim::traced(kDriverApi, CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync, "cuMemFreeAsync",
                     cuMemFreeAsync_params{dptr, stream},
                     [&] { return free_stream_ordered("cuMemFreeAsync", dptr, stream, false); });
}

CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream) {
  return sim::traced(kDriverApi, CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz, "cuMemFreeAsync_ptsz",
                     cuMemFreeAsync_ptsz_params{dptr, stream},
                     [&] { return free_stream_ordered("cuMemFreeAsync", dptr, stream, true); });
}

CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* pool, CUdevice dev) {
  if (!pool) return CUDA_ERROR_INVALID_VALUE;
  if (!sim::valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *pool = &g_default_pool[dev];
  return CUDA_SUCCESS;
}

CUresult cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* props) {
  if (!pool || !props || props->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
  if (!sim::valid_device(props->location.id)) return CUDA_ERROR_INVALID_DEVICE;
  *pool = new CUmemPoolHandle_st{props->location.id};
  return CUDA_SUCCESS;
}

CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  if (!pool) return CUDA_ERROR_INVALID_VALUE;
  if (pool < &g_default_pool[0] || pool > &g_default_pool[63]) delete pool;
  return CUDA_SUCCESS;
}

// Gives back what the pool's device kept beyond KEEP bytes.
CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
  if (!pool) return CUDA_ERROR_INVALID_VALUE;
  std::vector<uint64_t> released;
  {
    Pools& p = pools();
    std::lock_guard lock(p.mutex);
    uint64_t kept = 0;
    for (auto it = p.kept.begin(); it != p.kept.end();) {
      if (it->first.first == pool->device && kept + it->first.second > keep) {
        released.push_back(it->second);
        it = p.kept.erase(it);
      } else {
        if (it->first.first == pool->device) kept += it->first.second;
        ++it;
      }
    }
  }
  uint64_t size;
  for (uint64_t addr : released) sim::release(addr, false, &size);
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetMemPool(CUmemoryPool* pool, CUdevice dev) { return cuDeviceGetDefaultMemPool(pool, dev); }

// What a pool's device has handed out (used) and holds in all (reserved).
CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  if (!pool || !value) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t used = pool_bytes(pool->device, false), kept = pool_bytes(pool->device, true);
  switch (attr) {
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: *static_cast<cuuint64_t*>(value) = used; return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: *static_cast<cuuint64_t*>(value) = used + kept; return CUDA_SUCCESS;
    default: break;
  }
  std::lock_guard lock(pools().mutex);
  switch (attr) {
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: *static_cast<cuuint64_t*>(value) = pools().used_high[pool->device]; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
      *static_cast<cuuint64_t*>(value) = pools().reserved_high[pool->device];
      break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      *static_cast<cuuint64_t*>(value) = pools().release_threshold[pool->device];
      break;
    default: return CUDA_ERROR_NOT_SUPPORTED;
  }
  return CUDA_SUCCESS;
}

CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  if (!pool || !value) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(pools().mutex);
  const int device = pool->device;
  switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: pools().release_threshold[device] = *static_cast<cuuint64_t*>(value); break;
    // "It is illegal to set this attribute to a non-zero value": 0 resets the mark to the current value.
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: pools().used_high[device] = pool_bytes_locked(device, false); break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
      pools().reserved_high[device] = pool_bytes_locked(device, false) + pool_bytes_locked(device, true);
      break;
    default: break;  // the others change nothing here
  }
  return CUDA_SUCCESS;
}

CUresult cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                       CUmemAllocationGranularity_flags) {
  if (!granularity || !prop) return CUDA_ERROR_INVALID_VALUE;
  *granularity = sim::kVmmGranularity;
  return CUDA_SUCCESS;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                     unsigned long long flags) {
  return sim::traced(kDriverApi, CUPTI_DRIVER_TRACE_CBID_cuMemCreate, "cuMemCreate",
                     cuMemCreate_params{handle, size, prop, flags}, [&] {
                       sim::ApiCall call("cuMemCreate");
                       if (!handle || !prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
                           prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
                         return call.done(CUDA_ERROR_INVALID_VALUE);
                       if (!g_initialized.load()) return call.done(CUDA_ERROR_NOT_INITIALIZED);
                       uint64_t id = 0;
                       CUresult r = to_result(sim::vmm_create(prop->location.id, size, &id));
                       if (r == CUDA_SUCCESS) *handle = id;
                       return call.done(r, size);
                     });
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  return sim::traced(kDriverApi, CUPTI_DRIVER_TRACE_CBID_cuMemRelease, "cuMemRelease", cuMemRelease_params{handle},
                     [&] {
                       sim::ApiCall call("cuMemRelease");
                       uint64_t size = 0;
                       CUresult r = to_result(sim::vmm_release(handle, &size));
                       return call.done(r, size);
                     });
}

CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags) {
  return sim::traced(kDriverApi, CUPTI_DRIVER_TRACE_CBID_cuMemAddressReserve, "cuMemAddressReserve",
                     cuMemAddressReserve_params{ptr, size, alignment, addr, flags}, [&] {
                       sim::ApiCall call("cuMemAddressReserve");
                       if (!ptr) return call.done(CUDA_ERROR_INVALID_VALUE);
                       uint64_t addr = 0;
                       CUresult r = to_result(sim::vmm_reserve(size, alignment, &addr));
                       if (r == CUDA_SUCCESS) *ptr = addr;
                       return call.done(r, size);
                     });
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  return sim::traced(kDriverApi, CUPTI_DRIVER_TRACE_CBID_cuMemAddressFree, "cuMemAddressFree",
                     cuMemAddressFree_params{ptr, size}, [&] {
                       sim::ApiCall call("cuMemAddressFree");
                       return call.done(to_result(sim::vmm_free_reservation(ptr, size)), size);
                     });
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags) {
  return sim::traced(kDriverApi, CUPTI_DRIVER_TRACE_CBID_cuMemMap, "cuMemMap",
                     cuMemMap_params{ptr, size, offset, handle, flags}, [&] {
                       sim::ApiCall call("cuMemMap");
                       if (flags != 0) return call.done(CUDA_ERROR_INVALID_VALUE);
                       return call.done(to_result(sim::vmm_map(ptr, size, offset, handle)), size);
                     });
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  return sim::traced(kDriverApi, CUPTI_DRIVER_TRACE_CBID_cuMemUnmap, "cuMemUnmap", cuMemUnmap_params{ptr, size}, [&] {
    sim::ApiCall call("cuMemUnmap");
    uint64_t bytes = 0;
    CUresult r = to_result(sim::vmm_unmap(ptr, size, &bytes));
    return call.done(r, bytes);
  });
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  if (!desc || count == 0) return CUDA_ERROR_INVALID_VALUE;
  return to_result(sim::vmm_set_access(ptr, size));
}

CUresult cuStreamCreate(CUstream* stream, unsigned int) {
  if (!stream) return CUDA_ERROR_INVALID_VALUE;
  int device;
  CUresult r = context_device(&device);
  if (r == CUDA_SUCCESS) *stream = new CUstream_st{device};
  return r;
}

CUresult cuStreamDestroy_v2(CUstream stream) {
  if (!stream) return CUDA_ERROR_INVALID_HANDLE;
  delete stream;
  return CUDA_SUCCESS;
}

CUresult cuStreamSynchronize(CUstream) { return CUDA_SUCCESS; }

CUresult cuStreamBeginCapture_v2(CUstream stream, CUstreamCaptureMode) { return begin_capture(stream, false); }
CUresult cuStreamBeginCapture_v2_ptsz(CUstream stream, CUstreamCaptureMode) { return begin_capture(stream, true); }
CUresult cuStreamEndCapture(CUstream stream, CUgraph* graph) { return end_capture(stream, graph, false); }
CUresult cuStreamEndCapture_ptsz(CUstream stream, CUgraph* graph) { return end_capture(stream, graph, true); }
CUresult cuStreamIsCapturing(CUstream stream, CUstreamCaptureStatus* status) {
  return is_capturing(stream, status, false);
}
CUresult cuStreamIsCapturing_ptsz(CUstream stream, CUstreamCaptureStatus* status) {
  return is_capturing(stream, status, true);
}

// Only the device a pointer is on (what memtrace asks); other attributes are not simulated.
CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  if (!data) return CUDA_ERROR_INVALID_VALUE;
  if (!g_initialized.load()) return CUDA_ERROR_NOT_INITIALIZED;
  if (attribute != CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL) return CUDA_ERROR_NOT_SUPPORTED;
  int device = -1;
  if (sim::pointer_device(ptr, &device) != sim::Status::kOk || device < 0) return CUDA_ERROR_INVALID_VALUE;
  *static_cast<int*>(data) = device;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) {
  if (!uuid) return CUDA_ERROR_INVALID_VALUE;
  if (!g_initialized.load()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!sim::valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  unsigned char bytes[16];
  sim::device_uuid(dev, bytes);
  std::memcpy(uuid->bytes, bytes, sizeof bytes);
  return CUDA_SUCCESS;
}

CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  if (!sim::backed(dst, bytes) || !sim::backed(src, bytes)) return CUDA_ERROR_INVALID_VALUE;
  std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<void*>(src), bytes);
  return CUDA_SUCCESS;
}

CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t count) {
  if (!sim::backed(dst, count)) return CUDA_ERROR_INVALID_VALUE;
  std::memset(reinterpret_cast<void*>(dst), value, count);
  return CUDA_SUCCESS;
}

// Kernels run nowhere: a launch is accepted and does nothing.
CUresult cuLaunchKernel(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int,
                        unsigned int, CUstream, void**, void**) {
  return CUDA_SUCCESS;
}

CUresult cuGetErrorName(CUresult error, const char** str) {
  if (!str) return CUDA_ERROR_INVALID_VALUE;
  switch (error) {
    case CUDA_SUCCESS: *str = "CUDA_SUCCESS"; break;
    case CUDA_ERROR_INVALID_VALUE: *str = "CUDA_ERROR_INVALID_VALUE"; break;
    case CUDA_ERROR_OUT_OF_MEMORY: *str = "CUDA_ERROR_OUT_OF_MEMORY"; break;
    case CUDA_ERROR_NOT_INITIALIZED: *str = "CUDA_ERROR_NOT_INITIALIZED"; break;
    case CUDA_ERROR_NO_DEVICE: *str = "CUDA_ERROR_NO_DEVICE"; break;
    case CUDA_ERROR_INVALID_DEVICE: *str = "CUDA_ERROR_INVALID_DEVICE"; break;
    case CUDA_ERROR_INVALID_CONTEXT: *str = "CUDA_ERROR_INVALID_CONTEXT"; break;
    case CUDA_ERROR_INVALID_HANDLE: *str = "CUDA_ERROR_INVALID_HANDLE"; break;
    case CUDA_ERROR_NOT_FOUND: *str = "CUDA_ERROR_NOT_FOUND"; break;
    case CUDA_ERROR_NOT_SUPPORTED: *str = "CUDA_ERROR_NOT_SUPPORTED"; break;
    case CUDA_ERROR_ILLEGAL_STATE: *str = "CUDA_ERROR_ILLEGAL_STATE"; break;
    case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: *str = "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"; break;
    default: *str = nullptr; return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult error, const char** str) { return cuGetErrorName(error, str); }

}  // extern "C"
