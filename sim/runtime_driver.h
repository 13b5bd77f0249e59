// How the simulated runtime reaches the driver, as NVIDIA's does
// (../shared/observed/cudart-13.0-driver-lookups.md): it links no driver function. On its first
// call that needs the driver it opens libcuda.so.1, takes cuGetProcAddress_v2 from it by dlsym,
// asks it for every driver function NVIDIA's runtime 13.0 asks for, at the same versions and flags
// and in the same order (cudart_driver_lookups.h), asks for the driver's private tables
// (export_tables.h), and from then on reaches the driver only through what it was handed. So an
// interposer of dlsym or of cuGetProcAddress (memtrace's) sees what it sees under NVIDIA's runtime.
// The shared library and the static archive (nvcc's default, -cudart static) alike.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

namespace sim_runtime {

// The driver functions the runtime calls: (member, its ABI, the lookup that hands it over).
#define SIM_RUNTIME_DRIVER_FUNCTIONS(X)                                                                              \
  X(cuInit, PFN_cuInit_v2000, "cuInit", 2000, 0)                                                                     \
  X(cuGetProcAddress, PFN_cuGetProcAddress_v12000, "cuGetProcAddress", 12000, 0)                                     \
  X(cuGetExportTable, PFN_cuGetExportTable_v3000, "cuGetExportTable", 3000, 0)                                       \
  X(cuDriverGetVersion, PFN_cuDriverGetVersion_v2020, "cuDriverGetVersion", 2020, 0)                                 \
  X(cuDeviceGetCount, PFN_cuDeviceGetCount_v2000, "cuDeviceGetCount", 2000, 0)                                       \
  X(cuDeviceGetName, PFN_cuDeviceGetName_v2000, "cuDeviceGetName", 2000, 0)                                          \
  X(cuDeviceTotalMem, PFN_cuDeviceTotalMem_v3020, "cuDeviceTotalMem", 3020, 0)                                       \
  X(cuDeviceGetAttribute, PFN_cuDeviceGetAttribute_v2000, "cuDeviceGetAttribute", 2000, 0)                           \
  X(cuDeviceGetDefaultMemPool, PFN_cuDeviceGetDefaultMemPool_v11020, "cuDeviceGetDefaultMemPool", 11020, 0)          \
  X(cuDevicePrimaryCtxRetain, PFN_cuDevicePrimaryCtxRetain_v7000, "cuDevicePrimaryCtxRetain", 7000, 0)               \
  X(cuDevicePrimaryCtxReset, PFN_cuDevicePrimaryCtxReset_v11000, "cuDevicePrimaryCtxReset", 7000, 0)                 \
  X(cuCtxSetCurrent, PFN_cuCtxSetCurrent_v4000, "cuCtxSetCurrent", 4000, 0)                                          \
  X(cuMemGetInfo, PFN_cuMemGetInfo_v3020, "cuMemGetInfo", 3020, 0)                                                   \
  X(cuMemAlloc, PFN_cuMemAlloc_v3020, "cuMemAlloc", 3020, 0)                                                         \
  X(cuMemAllocPitch, PFN_cuMemAllocPitch_v3020, "cuMemAllocPitch", 3020, 0)                                          \
  X(cuMemAllocManaged, PFN_cuMemAllocManaged_v6000, "cuMemAllocManaged", 6000, 0)                                    \
  X(cuMemFree, PFN_cuMemFree_v3020, "cuMemFree", 3020, 0)                                                            \
  X(cuMemHostAlloc, PFN_cuMemHostAlloc_v2020, "cuMemHostAlloc", 2020, 0)                                             \
  X(cuMemFreeHost, PFN_cuMemFreeHost_v2000, "cuMemFreeHost", 2000, 0)                                                \
  X(cuPointerGetAttribute, PFN_cuPointerGetAttribute_v4000, "cuPointerGetAttribute", 4000, 0)                        \
  X(cuMemAllocAsync, PFN_cuMemAllocAsync_v11020, "cuMemAllocAsync", 11020, 0)                                        \
  X(cuMemAllocAsync_ptsz, PFN_cuMemAllocAsync_v11020_ptsz, "cuMemAllocAsync", 11020, 2)                              \
  X(cuMemAllocFromPoolAsync, PFN_cuMemAllocFromPoolAsync_v11020, "cuMemAllocFromPoolAsync", 11020, 0)                \
  X(cuMemAllocFromPoolAsync_ptsz, PFN_cuMemAllocFromPoolAsync_v11020_ptsz, "cuMemAllocFromPoolAsync", 11020, 2)      \
  X(cuMemFreeAsync, PFN_cuMemFreeAsync_v11020, "cuMemFreeAsync", 11020, 0)                                           \
  X(cuMemFreeAsync_ptsz, PFN_cuMemFreeAsync_v11020_ptsz, "cuMemFreeAsync", 11020, 2)                                 \
  X(cuMemPoolCreate, PFN_cuMemPoolCreate_v11020, "cuMemPoolCreate", 11020, 0)                                        \
  X(cuMemPoolDestroy, PFN_cuMemPoolDestroy_v11020, "cuMemPoolDestroy", 11020, 0)                                     \
  X(cuMemPoolTrimTo, PFN_cuMemPoolTrimTo_v11020, "cuMemPoolTrimTo", 11020, 0)                                        \
  X(cuMemPoolGetAttribute, PFN_cuMemPoolGetAttribute_v11020, "cuMemPoolGetAttribute", 11020, 0)                      \
  X(cuMemPoolSetAttribute, PFN_cuMemPoolSetAttribute_v11020, "cuMemPoolSetAttribute", 11020, 0)                      \
  X(cuMemPoolExportPointer, PFN_cuMemPoolExportPointer_v11020, "cuMemPoolExportPointer", 11020, 0)                   \
  X(cuMemPoolImportPointer, PFN_cuMemPoolImportPointer_v11020, "cuMemPoolImportPointer", 11020, 0)                   \
  X(cuIpcGetMemHandle, PFN_cuIpcGetMemHandle_v4010, "cuIpcGetMemHandle", 4010, 0)                                    \
  X(cuIpcOpenMemHandle, PFN_cuIpcOpenMemHandle_v11000, "cuIpcOpenMemHandle", 11000, 0)                               \
  X(cuIpcCloseMemHandle, PFN_cuIpcCloseMemHandle_v4010, "cuIpcCloseMemHandle", 4010, 0)                              \
  X(cuStreamCreate, PFN_cuStreamCreate_v2000, "cuStreamCreate", 2000, 0)                                             \
  X(cuStreamDestroy, PFN_cuStreamDestroy_v4000, "cuStreamDestroy", 4000, 0)                                          \
  X(cuStreamBeginCapture, PFN_cuStreamBeginCapture_v10010, "cuStreamBeginCapture", 10010, 0)                         \
  X(cuStreamBeginCapture_ptsz, PFN_cuStreamBeginCapture_v10010_ptsz, "cuStreamBeginCapture", 10010, 2)               \
  X(cuStreamEndCapture, PFN_cuStreamEndCapture_v10000, "cuStreamEndCapture", 10000, 0)                               \
  X(cuStreamEndCapture_ptsz, PFN_cuStreamEndCapture_v10000_ptsz, "cuStreamEndCapture", 10000, 2)                     \
  X(cuStreamIsCapturing, PFN_cuStreamIsCapturing_v10000, "cuStreamIsCapturing", 10000, 0)                            \
  X(cuStreamIsCapturing_ptsz, PFN_cuStreamIsCapturing_v10000_ptsz, "cuStreamIsCapturing", 10000, 2)                  \
  X(cuGraphCreate, PFN_cuGraphCreate_v10000, "cuGraphCreate", 10000, 0)                                              \
  X(cuGraphDestroy, PFN_cuGraphDestroy_v10000, "cuGraphDestroy", 10000, 0)                                           \
  X(cuGraphAddNode, PFN_cuGraphAddNode_v12030, "cuGraphAddNode", 12030, 0)                                           \
  X(cuGraphAddNode_v12020, PFN_cuGraphAddNode_v12020, "cuGraphAddNode", 12020, 0)                                    \
  X(cuGraphNodeSetParams, PFN_cuGraphNodeSetParams_v12020, "cuGraphNodeSetParams", 12020, 0)                         \
  X(cuGraphExecNodeSetParams, PFN_cuGraphExecNodeSetParams_v12020, "cuGraphExecNodeSetParams", 12020, 0)             \
  X(cuGraphAddMemAllocNode, PFN_cuGraphAddMemAllocNode_v11040, "cuGraphAddMemAllocNode", 11040, 0)                   \
  X(cuGraphAddMemFreeNode, PFN_cuGraphAddMemFreeNode_v11040, "cuGraphAddMemFreeNode", 11040, 0)                      \
  X(cuGraphInstantiateWithFlags, PFN_cuGraphInstantiateWithFlags_v11040, "cuGraphInstantiateWithFlags", 11040, 0)    \
  X(cuGraphLaunch, PFN_cuGraphLaunch_v10000, "cuGraphLaunch", 10000, 0)                                              \
  X(cuGraphExecDestroy, PFN_cuGraphExecDestroy_v10000, "cuGraphExecDestroy", 10000, 0)                               \
  X(cuDeviceGetGraphMemAttribute, PFN_cuDeviceGetGraphMemAttribute_v11040, "cuDeviceGetGraphMemAttribute", 11040, 0) \
  X(cuDeviceGraphMemTrim, PFN_cuDeviceGraphMemTrim_v11040, "cuDeviceGraphMemTrim", 11040, 0)

// A runtime of an older release (the vendored CUDA 12.2 copy) has none of a newer one's: those stay null.
struct Driver {
#define SIM_RUNTIME_DRIVER_MEMBER(member, type, name, version, flags) type member;
  SIM_RUNTIME_DRIVER_FUNCTIONS(SIM_RUNTIME_DRIVER_MEMBER)
#undef SIM_RUNTIME_DRIVER_MEMBER
};

// The driver, reached on the first call (on any thread) and kept. Null when it cannot be reached;
// then *ERROR says what every call of the runtime returns: cudaErrorInsufficientDriver without a
// driver, cudaErrorSymbolNotFound without the driver's private table. On the thread that is
// initializing it (a tool the driver loads at cuInit calling back into the runtime) it is null,
// with cudaErrorInitializationError.
const Driver* driver(cudaError_t* error = nullptr);
// What the driver's cuInit, which the runtime makes as it initializes, answered.
CUresult driver_init_result();

}  // namespace sim_runtime
