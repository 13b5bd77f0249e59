// Interposers for the CUDA runtime's allocation APIs (libcudart). Each calls the real function,
// then records what happened; the program sees exactly what the real call returned.
#include <cuda_runtime_api.h>

#include "interpose.h"

using namespace memtrace;
using namespace memtrace::inject;

// Declared by the runtime headers only when compiling for the per-thread default stream.
extern "C" {
cudaError_t cudaMallocAsync_ptsz(void** devPtr, size_t size, cudaStream_t stream);
cudaError_t cudaFreeAsync_ptsz(void* devPtr, cudaStream_t stream);
cudaError_t cudaMallocFromPoolAsync_ptsz(void** ptr, size_t size, cudaMemPool_t pool, cudaStream_t stream);
}

namespace {

template <typename Fn>
using Real = RealFunction<Fn>;

constexpr cudaError_t kMissing = cudaErrorInitializationError;  // no runtime to call

cudaError_t malloc_async(Api api, uint64_t caller, Real<decltype(&cudaMallocAsync)>& real, void** ptr, size_t size,
                         cudaStream_t stream, Ordering ordering) {
  Call call(api, caller);
  cudaError_t result = call_real<kMissing>(call, real, ptr, size, stream);
  return record_after(call, result, address_of(result, ptr), size, device_of_pointer(call, runtime_device), stream,
                      ordering);
}

cudaError_t malloc_from_pool(uint64_t caller, Real<decltype(&cudaMallocFromPoolAsync)>& real, void** ptr, size_t size,
                             cudaMemPool_t pool, cudaStream_t stream, Ordering ordering) {
  Call call(Api::kCudaMallocFromPoolAsync, caller);
  cudaError_t result = call_real<kMissing>(call, real, ptr, size, pool, stream);
  if (call.active()) call.event.handle = reinterpret_cast<uint64_t>(pool);
  return record_after(call, result, address_of(result, ptr), size, device_of_pointer(call, runtime_device), stream,
                      ordering);
}

Real<decltype(&cudaMalloc)> real_cudaMalloc("cudaMalloc", Library::kRuntime);
Real<decltype(&cudaFree)> real_cudaFree("cudaFree", Library::kRuntime);
Real<decltype(&cudaMallocAsync)> real_cudaMallocAsync("cudaMallocAsync", Library::kRuntime);
Real<decltype(&cudaMallocAsync)> real_cudaMallocAsync_ptsz("cudaMallocAsync_ptsz", Library::kRuntime);
Real<decltype(&cudaFreeAsync)> real_cudaFreeAsync("cudaFreeAsync", Library::kRuntime);
Real<decltype(&cudaFreeAsync)> real_cudaFreeAsync_ptsz("cudaFreeAsync_ptsz", Library::kRuntime);
Real<decltype(&cudaMallocFromPoolAsync)> real_cudaMallocFromPoolAsync("cudaMallocFromPoolAsync", Library::kRuntime);
Real<decltype(&cudaMallocFromPoolAsync)> real_cudaMallocFromPoolAsync_ptsz("cudaMallocFromPoolAsync_ptsz",
                                                                           Library::kRuntime);
Real<decltype(&cudaMallocManaged)> real_cudaMallocManaged("cudaMallocManaged", Library::kRuntime);
Real<decltype(&cudaMallocHost)> real_cudaMallocHost("cudaMallocHost", Library::kRuntime);
Real<decltype(&cudaHostAlloc)> real_cudaHostAlloc("cudaHostAlloc", Library::kRuntime);
Real<decltype(&cudaFreeHost)> real_cudaFreeHost("cudaFreeHost", Library::kRuntime);
Real<decltype(&cudaMallocPitch)> real_cudaMallocPitch("cudaMallocPitch", Library::kRuntime);
Real<decltype(&cudaMalloc3D)> real_cudaMalloc3D("cudaMalloc3D", Library::kRuntime);
Real<decltype(&cudaGetDeviceCount)> real_cudaGetDeviceCount("cudaGetDeviceCount", Library::kRuntime);

}  // namespace

MEMTRACE_EXPORT cudaError_t cudaGetDeviceCount(int* count) {
  const uint64_t caller = MEMTRACE_CALLER;
  note_cuda_use();
  return call_real<kMissing>(real_cudaGetDeviceCount, caller, count);
}

MEMTRACE_EXPORT cudaError_t cudaMalloc(void** devPtr, size_t size) {
  Call call(Api::kCudaMalloc, MEMTRACE_CALLER);
  cudaError_t result = call_real<kMissing>(call, real_cudaMalloc, devPtr, size);
  return record_after(call, result, address_of(result, devPtr), size, current_runtime_device(call));
}

MEMTRACE_EXPORT cudaError_t cudaFree(void* devPtr) {
  return free_call<kMissing>(Api::kCudaFree, MEMTRACE_CALLER, real_cudaFree, reinterpret_cast<uint64_t>(devPtr), 0,
                             nullptr, Ordering::kImmediate, devPtr);
}

MEMTRACE_EXPORT cudaError_t cudaMallocAsync(void** devPtr, size_t size, cudaStream_t stream) {
  return malloc_async(Api::kCudaMallocAsync, MEMTRACE_CALLER, real_cudaMallocAsync, devPtr, size, stream,
                      Ordering::kStream);
}

MEMTRACE_EXPORT cudaError_t cudaMallocAsync_ptsz(void** devPtr, size_t size, cudaStream_t stream) {
  return malloc_async(Api::kCudaMallocAsync, MEMTRACE_CALLER, real_cudaMallocAsync_ptsz, devPtr, size, stream,
                      Ordering::kPerThreadStream);
}

MEMTRACE_EXPORT cudaError_t cudaFreeAsync(void* devPtr, cudaStream_t stream) {
  return free_call<kMissing>(Api::kCudaFreeAsync, MEMTRACE_CALLER, real_cudaFreeAsync,
                             reinterpret_cast<uint64_t>(devPtr), 0, stream, Ordering::kStream, devPtr, stream);
}

MEMTRACE_EXPORT cudaError_t cudaFreeAsync_ptsz(void* devPtr, cudaStream_t stream) {
  return free_call<kMissing>(Api::kCudaFreeAsync, MEMTRACE_CALLER, real_cudaFreeAsync_ptsz,
                             reinterpret_cast<uint64_t>(devPtr), 0, stream, Ordering::kPerThreadStream, devPtr, stream);
}

MEMTRACE_EXPORT cudaError_t cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t pool, cudaStream_t stream) {
  return malloc_from_pool(MEMTRACE_CALLER, real_cudaMallocFromPoolAsync, ptr, size, pool, stream, Ordering::kStream);
}

MEMTRACE_EXPORT cudaError_t cudaMallocFromPoolAsync_ptsz(void** ptr, size_t size, cudaMemPool_t pool,
                                                         cudaStream_t stream) {
  return malloc_from_pool(MEMTRACE_CALLER, real_cudaMallocFromPoolAsync_ptsz, ptr, size, pool, stream,
                          Ordering::kPerThreadStream);
}

MEMTRACE_EXPORT cudaError_t cudaMallocManaged(void** devPtr, size_t size, unsigned int flags) {
  Call call(Api::kCudaMallocManaged, MEMTRACE_CALLER);
  cudaError_t result = call_real<kMissing>(call, real_cudaMallocManaged, devPtr, size, flags);
  return record_after(call, result, address_of(result, devPtr), size, current_runtime_device(call));
}

MEMTRACE_EXPORT cudaError_t cudaMallocHost(void** ptr, size_t size) {
  Call call(Api::kCudaMallocHost, MEMTRACE_CALLER);
  cudaError_t result = call_real<kMissing>(call, real_cudaMallocHost, ptr, size);
  return record_after(call, result, address_of(result, ptr), size, no_device);
}

MEMTRACE_EXPORT cudaError_t cudaHostAlloc(void** pHost, size_t size, unsigned int flags) {
  Call call(Api::kCudaHostAlloc, MEMTRACE_CALLER);
  cudaError_t result = call_real<kMissing>(call, real_cudaHostAlloc, pHost, size, flags);
  return record_after(call, result, address_of(result, pHost), size, no_device);
}

MEMTRACE_EXPORT cudaError_t cudaFreeHost(void* ptr) {
  return free_call<kMissing>(Api::kCudaFreeHost, MEMTRACE_CALLER, real_cudaFreeHost, reinterpret_cast<uint64_t>(ptr), 0,
                             nullptr, Ordering::kImmediate, ptr);
}

MEMTRACE_EXPORT cudaError_t cudaMallocPitch(void** devPtr, size_t* pitch, size_t width, size_t height) {
  Call call(Api::kCudaMallocPitch, MEMTRACE_CALLER);
  cudaError_t result = call_real<kMissing>(call, real_cudaMallocPitch, devPtr, pitch, width, height);
  uint64_t bytes = result == cudaSuccess && pitch ? uint64_t(*pitch) * height : uint64_t(width) * height;
  return record_after(call, result, address_of(result, devPtr), bytes, current_runtime_device(call));
}

MEMTRACE_EXPORT cudaError_t cudaMalloc3D(cudaPitchedPtr* pitchedDevPtr, cudaExtent extent) {
  Call call(Api::kCudaMalloc3D, MEMTRACE_CALLER);
  cudaError_t result = call_real<kMissing>(call, real_cudaMalloc3D, pitchedDevPtr, extent);
  bool ok = result == cudaSuccess && pitchedDevPtr;
  uint64_t pitch = ok ? pitchedDevPtr->pitch : extent.width;
  uint64_t addr = ok ? reinterpret_cast<uint64_t>(pitchedDevPtr->ptr) : 0;
  return record_after(call, result, addr, pitch * extent.height * extent.depth, current_runtime_device(call));
}
