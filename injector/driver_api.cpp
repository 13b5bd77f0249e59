// Interposers for the CUDA driver's allocation APIs (libcuda), including the virtual memory
// management calls that PyTorch's expandable segments use.
#include <cuda.h>

#include "interpose.h"

using namespace memtrace;
using namespace memtrace::inject;

extern "C" {
CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream hStream);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream);
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream);
}

namespace {

template <typename Fn>
using Real = RealFunction<Fn>;

constexpr CUresult kMissing = CUDA_ERROR_NOT_INITIALIZED;  // no driver to call

CUresult alloc_async(Api api, uint64_t caller, Real<decltype(&cuMemAllocAsync)>& real, CUdeviceptr* dptr,
                     size_t bytesize, CUstream stream, Ordering ordering) {
  Call call(api, caller);
  CUresult result = call_real<kMissing>(call, real, dptr, bytesize, stream);
  return record_after(call, result, address_of(result, dptr), bytesize, device_of_pointer(call, driver_device), stream,
                      ordering);
}

CUresult alloc_from_pool(uint64_t caller, Real<decltype(&cuMemAllocFromPoolAsync)>& real, CUdeviceptr* dptr,
                         size_t bytesize, CUmemoryPool pool, CUstream stream, Ordering ordering) {
  Call call(Api::kCuMemAllocFromPoolAsync, caller);
  CUresult result = call_real<kMissing>(call, real, dptr, bytesize, pool, stream);
  if (call.active()) call.event.handle = reinterpret_cast<uint64_t>(pool);
  return record_after(call, result, address_of(result, dptr), bytesize, device_of_pointer(call, driver_device), stream,
                      ordering);
}

Real<decltype(&cuInit)> real_cuInit("cuInit", Library::kDriver);
Real<decltype(&cuDeviceGetCount)> real_cuDeviceGetCount("cuDeviceGetCount", Library::kDriver);
Real<decltype(&cuMemAlloc)> real_cuMemAlloc("cuMemAlloc_v2", Library::kDriver);
Real<decltype(&cuMemFree)> real_cuMemFree("cuMemFree_v2", Library::kDriver);
Real<decltype(&cuMemAllocAsync)> real_cuMemAllocAsync("cuMemAllocAsync", Library::kDriver);
Real<decltype(&cuMemAllocAsync)> real_cuMemAllocAsync_ptsz("cuMemAllocAsync_ptsz", Library::kDriver);
Real<decltype(&cuMemFreeAsync)> real_cuMemFreeAsync("cuMemFreeAsync", Library::kDriver);
Real<decltype(&cuMemFreeAsync)> real_cuMemFreeAsync_ptsz("cuMemFreeAsync_ptsz", Library::kDriver);
Real<decltype(&cuMemAllocFromPoolAsync)> real_cuMemAllocFromPoolAsync("cuMemAllocFromPoolAsync", Library::kDriver);
Real<decltype(&cuMemAllocFromPoolAsync)> real_cuMemAllocFromPoolAsync_ptsz("cuMemAllocFromPoolAsync_ptsz",
                                                                           Library::kDriver);
Real<decltype(&cuMemAllocManaged)> real_cuMemAllocManaged("cuMemAllocManaged", Library::kDriver);
Real<decltype(&cuMemHostAlloc)> real_cuMemHostAlloc("cuMemHostAlloc", Library::kDriver);
Real<decltype(&cuMemAllocHost)> real_cuMemAllocHost("cuMemAllocHost_v2", Library::kDriver);
Real<decltype(&cuMemFreeHost)> real_cuMemFreeHost("cuMemFreeHost", Library::kDriver);
Real<decltype(&cuMemAllocPitch)> real_cuMemAllocPitch("cuMemAllocPitch_v2", Library::kDriver);
Real<decltype(&cuMemCreate)> real_cuMemCreate("cuMemCreate", Library::kDriver);
Real<decltype(&cuMemRelease)> real_cuMemRelease("cuMemRelease", Library::kDriver);
Real<decltype(&cuMemMap)> real_cuMemMap("cuMemMap", Library::kDriver);
Real<decltype(&cuMemUnmap)> real_cuMemUnmap("cuMemUnmap", Library::kDriver);
Real<decltype(&cuMemAddressReserve)> real_cuMemAddressReserve("cuMemAddressReserve", Library::kDriver);
Real<decltype(&cuMemAddressFree)> real_cuMemAddressFree("cuMemAddressFree", Library::kDriver);

}  // namespace

MEMTRACE_EXPORT CUresult cuInit(unsigned int flags) {
  const uint64_t caller = MEMTRACE_CALLER;
  note_cuda_use();
  return call_real<kMissing>(real_cuInit, caller, flags);
}

MEMTRACE_EXPORT CUresult cuDeviceGetCount(int* count) {
  const uint64_t caller = MEMTRACE_CALLER;
  note_cuda_use();
  return call_real<kMissing>(real_cuDeviceGetCount, caller, count);
}

MEMTRACE_EXPORT CUresult cuMemAlloc(CUdeviceptr* dptr, size_t bytesize) {
  Call call(Api::kCuMemAlloc, MEMTRACE_CALLER);
  CUresult result = call_real<kMissing>(call, real_cuMemAlloc, dptr, bytesize);
  return record_after(call, result, address_of(result, dptr), bytesize, current_driver_device(call));
}

MEMTRACE_EXPORT CUresult cuMemFree(CUdeviceptr dptr) {
  return free_call<kMissing>(Api::kCuMemFree, MEMTRACE_CALLER, real_cuMemFree, dptr, 0, nullptr, Ordering::kImmediate,
                             dptr);
}

MEMTRACE_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  return alloc_async(Api::kCuMemAllocAsync, MEMTRACE_CALLER, real_cuMemAllocAsync, dptr, bytesize, hStream,
                     Ordering::kStream);
}

MEMTRACE_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  return alloc_async(Api::kCuMemAllocAsync, MEMTRACE_CALLER, real_cuMemAllocAsync_ptsz, dptr, bytesize, hStream,
                     Ordering::kPerThreadStream);
}

MEMTRACE_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
  return free_call<kMissing>(Api::kCuMemFreeAsync, MEMTRACE_CALLER, real_cuMemFreeAsync, dptr, 0, hStream,
                             Ordering::kStream, dptr, hStream);
}

MEMTRACE_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) {
  return free_call<kMissing>(Api::kCuMemFreeAsync, MEMTRACE_CALLER, real_cuMemFreeAsync_ptsz, dptr, 0, hStream,
                             Ordering::kPerThreadStream, dptr, hStream);
}

MEMTRACE_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                                 CUstream hStream) {
  return alloc_from_pool(MEMTRACE_CALLER, real_cuMemAllocFromPoolAsync, dptr, bytesize, pool, hStream,
                         Ordering::kStream);
}

MEMTRACE_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                                      CUstream hStream) {
  return alloc_from_pool(MEMTRACE_CALLER, real_cuMemAllocFromPoolAsync_ptsz, dptr, bytesize, pool, hStream,
                         Ordering::kPerThreadStream);
}

MEMTRACE_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  Call call(Api::kCuMemAllocManaged, MEMTRACE_CALLER);
  CUresult result = call_real<kMissing>(call, real_cuMemAllocManaged, dptr, bytesize, flags);
  return record_after(call, result, address_of(result, dptr), bytesize, current_driver_device(call));
}

MEMTRACE_EXPORT CUresult cuMemHostAlloc(void** pp, size_t bytesize, unsigned int Flags) {
  Call call(Api::kCuMemHostAlloc, MEMTRACE_CALLER);
  CUresult result = call_real<kMissing>(call, real_cuMemHostAlloc, pp, bytesize, Flags);
  return record_after(call, result, address_of(result, pp), bytesize, no_device);
}

MEMTRACE_EXPORT CUresult cuMemAllocHost(void** pp, size_t bytesize) {
  Call call(Api::kCuMemAllocHost, MEMTRACE_CALLER);
  CUresult result = call_real<kMissing>(call, real_cuMemAllocHost, pp, bytesize);
  return record_after(call, result, address_of(result, pp), bytesize, no_device);
}

MEMTRACE_EXPORT CUresult cuMemFreeHost(void* p) {
  return free_call<kMissing>(Api::kCuMemFreeHost, MEMTRACE_CALLER, real_cuMemFreeHost, reinterpret_cast<uint64_t>(p), 0,
                             nullptr, Ordering::kImmediate, p);
}

MEMTRACE_EXPORT CUresult cuMemAllocPitch(CUdeviceptr* dptr, size_t* pPitch, size_t WidthInBytes, size_t Height,
                                         unsigned int ElementSizeBytes) {
  Call call(Api::kCuMemAllocPitch, MEMTRACE_CALLER);
  CUresult result =
      call_real<kMissing>(call, real_cuMemAllocPitch, dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
  uint64_t bytes = result == CUDA_SUCCESS && pPitch ? uint64_t(*pPitch) * Height : uint64_t(WidthInBytes) * Height;
  return record_after(call, result, address_of(result, dptr), bytes, current_driver_device(call));
}

// Physical memory behind a handle: the handle is the object's identity, its device the
// location the program asked for.
MEMTRACE_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                                     unsigned long long flags) {
  Call call(Api::kCuMemCreate, MEMTRACE_CALLER);
  CUresult result = call_real<kMissing>(call, real_cuMemCreate, handle, size, prop, flags);
  int device = prop && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE ? prop->location.id : -1;
  uint64_t id = result == CUDA_SUCCESS && handle ? *handle : 0;
  return record_after(call, result, id, size, [device] { return device; });
}

MEMTRACE_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  return free_call<kMissing>(Api::kCuMemRelease, MEMTRACE_CALLER, real_cuMemRelease, handle, 0, nullptr,
                             Ordering::kImmediate, handle);
}

MEMTRACE_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                                  unsigned long long flags) {
  Call call(Api::kCuMemMap, MEMTRACE_CALLER);
  CUresult result = call_real<kMissing>(call, real_cuMemMap, ptr, size, offset, handle, flags);
  if (call.active()) call.event.handle = handle;
  return record_after(call, result, ptr, size, no_device);
}

MEMTRACE_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  return free_call<kMissing>(Api::kCuMemUnmap, MEMTRACE_CALLER, real_cuMemUnmap, ptr, size, nullptr,
                             Ordering::kImmediate, ptr, size);
}

MEMTRACE_EXPORT CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                             unsigned long long flags) {
  Call call(Api::kCuMemAddressReserve, MEMTRACE_CALLER);
  CUresult result = call_real<kMissing>(call, real_cuMemAddressReserve, ptr, size, alignment, addr, flags);
  return record_after(call, result, address_of(result, ptr), size, no_device);
}

MEMTRACE_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  return free_call<kMissing>(Api::kCuMemAddressFree, MEMTRACE_CALLER, real_cuMemAddressFree, ptr, size, nullptr,
                             Ordering::kImmediate, ptr, size);
}
