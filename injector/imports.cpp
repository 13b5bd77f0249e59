// Interposers for memory of other processes opened here, and for multicast objects: IPC handles
// (torch.multiprocessing's CUDA tensors, NCCL's peer buffers), pool allocations imported from
// another process's pool, physical memory imported by a shareable handle (NCCL's cuMem buffers),
// and multicast objects (NVLS). They hold no device memory of this process, but they are what
// the process can reach and keep alive in others: recorded, each with its own kind.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include "interpose.h"

// cuda.h names the CUDA 11 entry point cuIpcOpenMemHandle; the CUDA 4 one has the same ABI.
#undef cuIpcOpenMemHandle
extern "C" CUresult cuIpcOpenMemHandle(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int Flags);

using namespace memtrace;
using namespace memtrace::inject;

namespace {

RealFunction<decltype(&cudaIpcOpenMemHandle)> real_cudaIpcOpenMemHandle("cudaIpcOpenMemHandle", Library::kRuntime);
RealFunction<decltype(&cudaIpcCloseMemHandle)> real_cudaIpcCloseMemHandle("cudaIpcCloseMemHandle", Library::kRuntime);
RealFunction<decltype(&cudaMemPoolImportPointer)> real_cudaMemPoolImportPointer("cudaMemPoolImportPointer",
                                                                                Library::kRuntime);
RealFunction<decltype(&cuIpcOpenMemHandle_v2)> real_cuIpcOpenMemHandle_v2("cuIpcOpenMemHandle_v2", Library::kDriver);
RealFunction<decltype(&cuIpcOpenMemHandle_v2)> real_cuIpcOpenMemHandle("cuIpcOpenMemHandle", Library::kDriver);
RealFunction<decltype(&cuIpcCloseMemHandle)> real_cuIpcCloseMemHandle("cuIpcCloseMemHandle", Library::kDriver);
RealFunction<decltype(&cuMemPoolImportPointer)> real_cuMemPoolImportPointer("cuMemPoolImportPointer", Library::kDriver);
RealFunction<decltype(&cuMemImportFromShareableHandle)> real_cuMemImportFromShareableHandle(
    "cuMemImportFromShareableHandle", Library::kDriver);
RealFunction<decltype(&cuMulticastCreate)> real_cuMulticastCreate("cuMulticastCreate", Library::kDriver);

CUresult ipc_open(uint64_t caller, RealFunction<decltype(&cuIpcOpenMemHandle_v2)>& real, CUdeviceptr* pdptr,
                  CUipcMemHandle handle, unsigned int flags) {
  Call call(Api::kCuIpcOpenMemHandle, caller);
  CUresult result = call_real<CUDA_ERROR_NOT_INITIALIZED>(call, real, pdptr, handle, flags);
  return record_opened(call, result, address_of(result, pdptr));
}

}  // namespace

MEMTRACE_EXPORT cudaError_t cudaIpcOpenMemHandle(void** devPtr, cudaIpcMemHandle_t handle, unsigned int flags) {
  Call call(Api::kCudaIpcOpenMemHandle, MEMTRACE_CALLER);
  cudaError_t result = call_real<cudaErrorInitializationError>(call, real_cudaIpcOpenMemHandle, devPtr, handle, flags);
  return record_opened(call, result, address_of(result, devPtr));
}

MEMTRACE_EXPORT cudaError_t cudaIpcCloseMemHandle(void* devPtr) {
  return free_call<cudaErrorInitializationError>(Api::kCudaIpcCloseMemHandle, MEMTRACE_CALLER,
                                                 real_cudaIpcCloseMemHandle, reinterpret_cast<uint64_t>(devPtr), 0,
                                                 nullptr, Ordering::kImmediate, devPtr);
}

MEMTRACE_EXPORT cudaError_t cudaMemPoolImportPointer(void** ptr, cudaMemPool_t memPool,
                                                     cudaMemPoolPtrExportData* exportData) {
  Call call(Api::kCudaMemPoolImportPointer, MEMTRACE_CALLER);
  cudaError_t result =
      call_real<cudaErrorInitializationError>(call, real_cudaMemPoolImportPointer, ptr, memPool, exportData);
  if (call.active()) call.event.handle = reinterpret_cast<uint64_t>(memPool);
  return record_opened(call, result, address_of(result, ptr));
}

MEMTRACE_EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int Flags) {
  return ipc_open(MEMTRACE_CALLER, real_cuIpcOpenMemHandle_v2, pdptr, handle, Flags);
}

// The CUDA 4 entry point, which programs built before CUDA 11 still reach: the same ABI.
MEMTRACE_EXPORT CUresult cuIpcOpenMemHandle(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int Flags) {
  return ipc_open(MEMTRACE_CALLER, real_cuIpcOpenMemHandle, pdptr, handle, Flags);
}

MEMTRACE_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr dptr) {
  return free_call<CUDA_ERROR_NOT_INITIALIZED>(Api::kCuIpcCloseMemHandle, MEMTRACE_CALLER, real_cuIpcCloseMemHandle,
                                               dptr, 0, nullptr, Ordering::kImmediate, dptr);
}

MEMTRACE_EXPORT CUresult cuMemPoolImportPointer(CUdeviceptr* ptr_out, CUmemoryPool pool,
                                                CUmemPoolPtrExportData* shareData) {
  Call call(Api::kCuMemPoolImportPointer, MEMTRACE_CALLER);
  CUresult result = call_real<CUDA_ERROR_NOT_INITIALIZED>(call, real_cuMemPoolImportPointer, ptr_out, pool, shareData);
  if (call.active()) call.event.handle = reinterpret_cast<uint64_t>(pool);
  return record_opened(call, result, address_of(result, ptr_out));
}

// The imported handle's device is the one its properties name; its size is not the driver's to
// tell (its mappings say how much of it is used).
MEMTRACE_EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle, void* osHandle,
                                                        CUmemAllocationHandleType shHandleType) {
  Call call(Api::kCuMemImportFromShareableHandle, MEMTRACE_CALLER);
  CUresult result =
      call_real<CUDA_ERROR_NOT_INITIALIZED>(call, real_cuMemImportFromShareableHandle, handle, osHandle, shHandleType);
  const uint64_t id = result == CUDA_SUCCESS && handle ? *handle : 0;
  return record_after(call, result, id, 0, [&call, id] { return handle_device(call.origin(), id); });
}

MEMTRACE_EXPORT CUresult cuMulticastCreate(CUmemGenericAllocationHandle* mcHandle, const CUmulticastObjectProp* prop) {
  Call call(Api::kCuMulticastCreate, MEMTRACE_CALLER);
  CUresult result = call_real<CUDA_ERROR_NOT_INITIALIZED>(call, real_cuMulticastCreate, mcHandle, prop);
  return record_after(call, result, result == CUDA_SUCCESS && mcHandle ? *mcHandle : 0, prop ? prop->size : 0,
                      no_device);
}
