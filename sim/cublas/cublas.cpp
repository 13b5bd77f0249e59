// The stand-in cuBLAS: libcublas.so.13 with the handle calls PyTorch makes, allocating as the
// cuBLAS documentation (CUDA 12.9/13, "cuBLAS Library", sections 2.4.1 and 2.4.8) says cuBLAS
// does, over the simulated device. It computes nothing.
//
// cublasCreate "allocates hardware resources on the host and device"; without a workspace set by
// cublasSetWorkspace, kernels use "the default workspace pool allocated during the cuBLAS context
// creation", sized 32 MiB on Hopper (sm90) and Blackwell (sm10x, sm12x), 4 MiB on the others
// (2.4.8's recommended sizes "based on the cuBLAS default workspace pool size"). Which CUDA call
// makes the pool, and when, is not documented (cuBLAS is closed source); PyTorch's PR #113994
// (CublasHandlePool.cpp, Nov 2023) found cuBLAS 12.2 on taking its workspace with cudaMallocAsync
// where none was set. The stand-in takes the pool so, on the first call that needs a workspace
// with none set (PyTorch always sets one: cublasSetWorkspace after each cublasSetStream).
// Like NVIDIA's, it carries the runtime linked statically and exports only the cuBLAS API.
#include <cuda_runtime_api.h>

#include <cstddef>

#define CUBLAS_API extern "C" __attribute__((visibility("default")))

namespace {

enum Status { kSuccess = 0, kNotInitialized = 1, kAllocFailed = 3, kInvalidValue = 7 };

struct Handle {
  int device = 0;
  void* pool = nullptr;  // the default workspace pool
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  cudaStream_t stream = nullptr;
};

size_t default_pool_bytes(int device) {
  int major = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  return major == 9 || major == 10 || major == 12 ? size_t(32) << 20 : size_t(4) << 20;
}

}  // namespace

CUBLAS_API int cublasCreate_v2(Handle** handle) {
  if (!handle) return kInvalidValue;
  auto* h = new Handle;
  if (cudaGetDevice(&h->device) != cudaSuccess) {
    delete h;
    return kNotInitialized;
  }
  *handle = h;
  return kSuccess;
}

CUBLAS_API int cublasDestroy_v2(Handle* handle) {
  if (!handle) return kNotInitialized;
  if (handle->pool) cudaFree(handle->pool);
  delete handle;
  return kSuccess;
}

// 2.4.8: a workspace of the caller's, used instead of the default pool until the next
// cublasSetStream.
CUBLAS_API int cublasSetWorkspace_v2(Handle* handle, void* workspace, size_t bytes) {
  if (!handle) return kNotInitialized;
  handle->workspace = workspace;
  handle->workspace_bytes = bytes;
  return kSuccess;
}

// 2.4.8: "cublasSetStream() unconditionally resets the cuBLAS library workspace back to the
// default workspace pool".
CUBLAS_API int cublasSetStream_v2(Handle* handle, cudaStream_t stream) {
  if (!handle) return kNotInitialized;
  handle->stream = stream;
  handle->workspace = nullptr;
  handle->workspace_bytes = 0;
  return kSuccess;
}

CUBLAS_API int cublasSgemm_v2(Handle* handle, int, int, int, int, int, const float*, const float*, int, const float*,
                              int, const float*, float*, int) {
  if (!handle) return kNotInitialized;
  if (!handle->workspace && !handle->pool &&
      cudaMallocAsync(&handle->pool, default_pool_bytes(handle->device), handle->stream) != cudaSuccess) {
    handle->pool = nullptr;
    return kAllocFailed;
  }
  return kSuccess;
}
