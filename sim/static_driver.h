// The simulated runtime built as a static archive reaches the driver as NVIDIA's static runtime
// (nvcc's default, -cudart static) does: it opens libcuda.so.1 itself, fetches
// cuGetProcAddress_v2 from that handle with dlsym, and asks it for every other driver function.
// It links no CUDA library, so no driver call it makes passes an interposer in the global scope.
// Included by runtime_api.cpp after cuda.h and its own declarations: each driver call there
// becomes a call through a pointer fetched once.
#pragma once

#include <cuda.h>

namespace sim_static {
// The driver function NAME (as cuGetProcAddress takes it: no _v2) for this runtime's CUDA
// version; FLAGS asks for the per-thread default stream's. Aborts when the driver has none.
void* driver_function(const char* name, unsigned long long flags);
}  // namespace sim_static

#define MEMTRACE_SIM_DRIVER(fn, name, flags)                                                           \
  ([] {                                                                                                \
    static const auto p = reinterpret_cast<decltype(&::fn)>(sim_static::driver_function(name, flags)); \
    return p;                                                                                          \
  }())
#define MEMTRACE_SIM_DRIVER_PTSZ CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM

#define cuCtxSetCurrent(...) MEMTRACE_SIM_DRIVER(cuCtxSetCurrent, "cuCtxSetCurrent", 0)(__VA_ARGS__)
#define cuDeviceGetAttribute(...) MEMTRACE_SIM_DRIVER(cuDeviceGetAttribute, "cuDeviceGetAttribute", 0)(__VA_ARGS__)
#define cuDeviceGetCount(...) MEMTRACE_SIM_DRIVER(cuDeviceGetCount, "cuDeviceGetCount", 0)(__VA_ARGS__)
#define cuDeviceGetDefaultMemPool(...) \
  MEMTRACE_SIM_DRIVER(cuDeviceGetDefaultMemPool, "cuDeviceGetDefaultMemPool", 0)(__VA_ARGS__)
#define cuDeviceGetName(...) MEMTRACE_SIM_DRIVER(cuDeviceGetName, "cuDeviceGetName", 0)(__VA_ARGS__)
#define cuDevicePrimaryCtxReset_v2(...) \
  MEMTRACE_SIM_DRIVER(cuDevicePrimaryCtxReset_v2, "cuDevicePrimaryCtxReset", 0)(__VA_ARGS__)
#define cuDevicePrimaryCtxRetain(...) \
  MEMTRACE_SIM_DRIVER(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 0)(__VA_ARGS__)
#define cuDeviceTotalMem_v2(...) MEMTRACE_SIM_DRIVER(cuDeviceTotalMem_v2, "cuDeviceTotalMem", 0)(__VA_ARGS__)
#define cuDriverGetVersion(...) MEMTRACE_SIM_DRIVER(cuDriverGetVersion, "cuDriverGetVersion", 0)(__VA_ARGS__)
#define cuGetProcAddress_v2(...) MEMTRACE_SIM_DRIVER(cuGetProcAddress_v2, "cuGetProcAddress", 0)(__VA_ARGS__)
#define cuGraphDestroy(...) MEMTRACE_SIM_DRIVER(cuGraphDestroy, "cuGraphDestroy", 0)(__VA_ARGS__)
#define cuGraphCreate(...) MEMTRACE_SIM_DRIVER(cuGraphCreate, "cuGraphCreate", 0)(__VA_ARGS__)
#define cuGraphAddMemAllocNode(...) \
  MEMTRACE_SIM_DRIVER(cuGraphAddMemAllocNode, "cuGraphAddMemAllocNode", 0)(__VA_ARGS__)
#define cuGraphAddMemFreeNode(...) MEMTRACE_SIM_DRIVER(cuGraphAddMemFreeNode, "cuGraphAddMemFreeNode", 0)(__VA_ARGS__)
#define cuGraphInstantiateWithFlags(...) \
  MEMTRACE_SIM_DRIVER(cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags", 0)(__VA_ARGS__)
#define cuGraphLaunch(...) MEMTRACE_SIM_DRIVER(cuGraphLaunch, "cuGraphLaunch", 0)(__VA_ARGS__)
#define cuGraphExecDestroy(...) MEMTRACE_SIM_DRIVER(cuGraphExecDestroy, "cuGraphExecDestroy", 0)(__VA_ARGS__)
#define cuDeviceGetGraphMemAttribute(...) \
  MEMTRACE_SIM_DRIVER(cuDeviceGetGraphMemAttribute, "cuDeviceGetGraphMemAttribute", 0)(__VA_ARGS__)
#define cuDeviceGraphMemTrim(...) MEMTRACE_SIM_DRIVER(cuDeviceGraphMemTrim, "cuDeviceGraphMemTrim", 0)(__VA_ARGS__)
#define cuIpcGetMemHandle(...) MEMTRACE_SIM_DRIVER(cuIpcGetMemHandle, "cuIpcGetMemHandle", 0)(__VA_ARGS__)
#define cuIpcOpenMemHandle_v2(...) MEMTRACE_SIM_DRIVER(cuIpcOpenMemHandle_v2, "cuIpcOpenMemHandle", 0)(__VA_ARGS__)
#define cuIpcCloseMemHandle(...) MEMTRACE_SIM_DRIVER(cuIpcCloseMemHandle, "cuIpcCloseMemHandle", 0)(__VA_ARGS__)
#define cuInit(...) MEMTRACE_SIM_DRIVER(cuInit, "cuInit", 0)(__VA_ARGS__)
#define cuMemAlloc_v2(...) MEMTRACE_SIM_DRIVER(cuMemAlloc_v2, "cuMemAlloc", 0)(__VA_ARGS__)
#define cuMemAllocAsync(...) MEMTRACE_SIM_DRIVER(cuMemAllocAsync, "cuMemAllocAsync", 0)(__VA_ARGS__)
#define cuMemAllocAsync_ptsz(...) \
  MEMTRACE_SIM_DRIVER(cuMemAllocAsync_ptsz, "cuMemAllocAsync", MEMTRACE_SIM_DRIVER_PTSZ)(__VA_ARGS__)
#define cuMemAllocFromPoolAsync(...) \
  MEMTRACE_SIM_DRIVER(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", 0)(__VA_ARGS__)
#define cuMemAllocFromPoolAsync_ptsz(...) \
  MEMTRACE_SIM_DRIVER(cuMemAllocFromPoolAsync_ptsz, "cuMemAllocFromPoolAsync", MEMTRACE_SIM_DRIVER_PTSZ)(__VA_ARGS__)
#define cuMemAllocManaged(...) MEMTRACE_SIM_DRIVER(cuMemAllocManaged, "cuMemAllocManaged", 0)(__VA_ARGS__)
#define cuMemAllocPitch_v2(...) MEMTRACE_SIM_DRIVER(cuMemAllocPitch_v2, "cuMemAllocPitch", 0)(__VA_ARGS__)
#define cuMemFreeAsync(...) MEMTRACE_SIM_DRIVER(cuMemFreeAsync, "cuMemFreeAsync", 0)(__VA_ARGS__)
#define cuMemFreeAsync_ptsz(...) \
  MEMTRACE_SIM_DRIVER(cuMemFreeAsync_ptsz, "cuMemFreeAsync", MEMTRACE_SIM_DRIVER_PTSZ)(__VA_ARGS__)
#define cuMemFreeHost(...) MEMTRACE_SIM_DRIVER(cuMemFreeHost, "cuMemFreeHost", 0)(__VA_ARGS__)
#define cuMemFree_v2(...) MEMTRACE_SIM_DRIVER(cuMemFree_v2, "cuMemFree", 0)(__VA_ARGS__)
#define cuMemGetInfo_v2(...) MEMTRACE_SIM_DRIVER(cuMemGetInfo_v2, "cuMemGetInfo", 0)(__VA_ARGS__)
#define cuMemHostAlloc(...) MEMTRACE_SIM_DRIVER(cuMemHostAlloc, "cuMemHostAlloc", 0)(__VA_ARGS__)
#define cuMemPoolCreate(...) MEMTRACE_SIM_DRIVER(cuMemPoolCreate, "cuMemPoolCreate", 0)(__VA_ARGS__)
#define cuMemPoolDestroy(...) MEMTRACE_SIM_DRIVER(cuMemPoolDestroy, "cuMemPoolDestroy", 0)(__VA_ARGS__)
#define cuMemPoolTrimTo(...) MEMTRACE_SIM_DRIVER(cuMemPoolTrimTo, "cuMemPoolTrimTo", 0)(__VA_ARGS__)
#define cuMemPoolGetAttribute(...) MEMTRACE_SIM_DRIVER(cuMemPoolGetAttribute, "cuMemPoolGetAttribute", 0)(__VA_ARGS__)
#define cuMemPoolSetAttribute(...) MEMTRACE_SIM_DRIVER(cuMemPoolSetAttribute, "cuMemPoolSetAttribute", 0)(__VA_ARGS__)
#define cuPointerGetAttribute(...) MEMTRACE_SIM_DRIVER(cuPointerGetAttribute, "cuPointerGetAttribute", 0)(__VA_ARGS__)
#define cuStreamBeginCapture_v2(...) \
  MEMTRACE_SIM_DRIVER(cuStreamBeginCapture_v2, "cuStreamBeginCapture", 0)(__VA_ARGS__)
#define cuStreamBeginCapture_v2_ptsz(...) \
  MEMTRACE_SIM_DRIVER(cuStreamBeginCapture_v2_ptsz, "cuStreamBeginCapture", MEMTRACE_SIM_DRIVER_PTSZ)(__VA_ARGS__)
#define cuStreamCreate(...) MEMTRACE_SIM_DRIVER(cuStreamCreate, "cuStreamCreate", 0)(__VA_ARGS__)
#define cuStreamDestroy_v2(...) MEMTRACE_SIM_DRIVER(cuStreamDestroy_v2, "cuStreamDestroy", 0)(__VA_ARGS__)
#define cuStreamEndCapture(...) MEMTRACE_SIM_DRIVER(cuStreamEndCapture, "cuStreamEndCapture", 0)(__VA_ARGS__)
#define cuStreamEndCapture_ptsz(...) \
  MEMTRACE_SIM_DRIVER(cuStreamEndCapture_ptsz, "cuStreamEndCapture", MEMTRACE_SIM_DRIVER_PTSZ)(__VA_ARGS__)
#define cuStreamIsCapturing(...) MEMTRACE_SIM_DRIVER(cuStreamIsCapturing, "cuStreamIsCapturing", 0)(__VA_ARGS__)
#define cuStreamIsCapturing_ptsz(...) \
  MEMTRACE_SIM_DRIVER(cuStreamIsCapturing_ptsz, "cuStreamIsCapturing", MEMTRACE_SIM_DRIVER_PTSZ)(__VA_ARGS__)
