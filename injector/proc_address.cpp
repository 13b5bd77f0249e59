// Modern CUDA hands out driver functions through cuGetProcAddress and the runtime's
// cudaGetDriverEntryPoint(ByVersion); PyTorch's expandable segments get cuMemCreate and cuMemMap
// that way. Symbol interposition alone misses those calls, so we hand out our own interposers.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstring>

#include "interpose.h"

#undef cuGetProcAddress
#undef cuIpcOpenMemHandle

using namespace memtrace;
using namespace memtrace::inject;

extern "C" {
CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags);
CUresult cuIpcOpenMemHandle(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int Flags);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr*, size_t, CUstream);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr, CUstream);
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr*, size_t, CUmemoryPool, CUstream);
cudaError_t cudaGetDriverEntryPoint_ptsz(const char*, void**, unsigned long long, cudaDriverEntryPointQueryResult*);
cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char*, void**, unsigned int, unsigned long long,
                                                  cudaDriverEntryPointQueryResult*);
}

namespace {

constexpr unsigned long long kPerThreadStream = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
static_assert(static_cast<int>(CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) ==
              static_cast<int>(cudaEnablePerThreadDefaultStream));

struct Wrapped {
  const char* name;   // as cuGetProcAddress takes it: no _v2 or _ptsz suffix
  int since_version;  // the ABI our interposer has exists from this CUDA version on
  void* legacy_stream;
  void* per_thread_stream;
};

template <typename Fn>
void* as_pointer(Fn fn) {
  return reinterpret_cast<void*>(fn);
}

const Wrapped kWrapped[] = {
    {"cuMemAlloc", 3020, as_pointer(&cuMemAlloc_v2), as_pointer(&cuMemAlloc_v2)},
    {"cuMemFree", 3020, as_pointer(&cuMemFree_v2), as_pointer(&cuMemFree_v2)},
    {"cuMemAllocHost", 3020, as_pointer(&cuMemAllocHost_v2), as_pointer(&cuMemAllocHost_v2)},
    {"cuMemAllocPitch", 3020, as_pointer(&cuMemAllocPitch_v2), as_pointer(&cuMemAllocPitch_v2)},
    {"cuMemHostAlloc", 2020, as_pointer(&cuMemHostAlloc), as_pointer(&cuMemHostAlloc)},
    {"cuMemFreeHost", 2000, as_pointer(&cuMemFreeHost), as_pointer(&cuMemFreeHost)},
    {"cuMemAllocManaged", 6000, as_pointer(&cuMemAllocManaged), as_pointer(&cuMemAllocManaged)},
    {"cuMemAllocAsync", 11020, as_pointer(&cuMemAllocAsync), as_pointer(&cuMemAllocAsync_ptsz)},
    {"cuMemFreeAsync", 11020, as_pointer(&cuMemFreeAsync), as_pointer(&cuMemFreeAsync_ptsz)},
    {"cuMemAllocFromPoolAsync", 11020, as_pointer(&cuMemAllocFromPoolAsync), as_pointer(&cuMemAllocFromPoolAsync_ptsz)},
    {"cuMemCreate", 10020, as_pointer(&cuMemCreate), as_pointer(&cuMemCreate)},
    {"cuMemRelease", 10020, as_pointer(&cuMemRelease), as_pointer(&cuMemRelease)},
    {"cuMemMap", 10020, as_pointer(&cuMemMap), as_pointer(&cuMemMap)},
    {"cuMemUnmap", 10020, as_pointer(&cuMemUnmap), as_pointer(&cuMemUnmap)},
    {"cuMemAddressReserve", 10020, as_pointer(&cuMemAddressReserve), as_pointer(&cuMemAddressReserve)},
    {"cuMemAddressFree", 10020, as_pointer(&cuMemAddressFree), as_pointer(&cuMemAddressFree)},
    {"cuGraphAddMemAllocNode", 11040, as_pointer(&cuGraphAddMemAllocNode), as_pointer(&cuGraphAddMemAllocNode)},
    {"cuGraphAddMemFreeNode", 11040, as_pointer(&cuGraphAddMemFreeNode), as_pointer(&cuGraphAddMemFreeNode)},
    {"cuIpcOpenMemHandle", 11000, as_pointer(&cuIpcOpenMemHandle_v2), as_pointer(&cuIpcOpenMemHandle_v2)},
    {"cuIpcOpenMemHandle", 4010, as_pointer(&cuIpcOpenMemHandle), as_pointer(&cuIpcOpenMemHandle)},
    {"cuIpcCloseMemHandle", 4010, as_pointer(&cuIpcCloseMemHandle), as_pointer(&cuIpcCloseMemHandle)},
    {"cuMemPoolImportPointer", 11020, as_pointer(&cuMemPoolImportPointer), as_pointer(&cuMemPoolImportPointer)},
    {"cuMemImportFromShareableHandle", 10020, as_pointer(&cuMemImportFromShareableHandle),
     as_pointer(&cuMemImportFromShareableHandle)},
    {"cuMulticastCreate", 12010, as_pointer(&cuMulticastCreate), as_pointer(&cuMulticastCreate)},
    {"cuGetProcAddress", 12000, as_pointer(&cuGetProcAddress_v2), as_pointer(&cuGetProcAddress_v2)},
    {"cuGetProcAddress", 0, as_pointer(&cuGetProcAddress), as_pointer(&cuGetProcAddress)},
};

// Replaces a driver function the real lookup found with our interposer for it, when we have one
// with the same ABI (the newest the caller's version has: kWrapped lists a name's newest ABI
// first). Anything else is handed back untouched.
void substitute(const char* symbol, void** pfn, int cuda_version, unsigned long long flags) {
  if (!symbol || !pfn || !*pfn) return;
  for (const Wrapped& w : kWrapped) {
    if (std::strcmp(symbol, w.name) != 0 || cuda_version < w.since_version) continue;
    *pfn = (flags & kPerThreadStream) ? w.per_thread_stream : w.legacy_stream;
    return;
  }
}

// The runtime's own version, as cudaGetDriverEntryPoint asks the driver for the ABI it was built with.
constexpr int kRuntimeLookupVersion = CUDART_VERSION;

RealFunction<decltype(&cuGetProcAddress)> real_cuGetProcAddress("cuGetProcAddress", Library::kDriver);
RealFunction<decltype(&cuGetProcAddress_v2)> real_cuGetProcAddress_v2("cuGetProcAddress_v2", Library::kDriver);
RealFunction<decltype(&cudaGetDriverEntryPoint_ptsz)> real_cudaGetDriverEntryPoint("cudaGetDriverEntryPoint",
                                                                                   Library::kRuntime);
RealFunction<decltype(&cudaGetDriverEntryPoint_ptsz)> real_cudaGetDriverEntryPoint_ptsz("cudaGetDriverEntryPoint_ptsz",
                                                                                        Library::kRuntime);
RealFunction<decltype(&cudaGetDriverEntryPointByVersion_ptsz)> real_cudaGetDriverEntryPointByVersion(
    "cudaGetDriverEntryPointByVersion", Library::kRuntime);
RealFunction<decltype(&cudaGetDriverEntryPointByVersion_ptsz)> real_cudaGetDriverEntryPointByVersion_ptsz(
    "cudaGetDriverEntryPointByVersion_ptsz", Library::kRuntime);

// Asks the lookup the caller would have reached (the real function, with ARGS), then hands out our
// interposer in place of what it found for SYMBOL at VERSION with FLAGS.
template <auto kMissing, typename Fn, typename... Args>
auto looked_up(RealFunction<Fn>& real, uint64_t caller, const char* symbol, void** pfn, int version,
               unsigned long long flags, Args... args) {
  auto result = call_real<kMissing>(real, caller, args...);
  if (result == 0) substitute(symbol, pfn, version, flags);
  return result;
}

}  // namespace

MEMTRACE_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  return looked_up<CUDA_ERROR_NOT_INITIALIZED>(real_cuGetProcAddress, MEMTRACE_CALLER, symbol, pfn, cudaVersion, flags,
                                               symbol, pfn, cudaVersion, flags);
}

MEMTRACE_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                                             CUdriverProcAddressQueryResult* symbolStatus) {
  return looked_up<CUDA_ERROR_NOT_INITIALIZED>(real_cuGetProcAddress_v2, MEMTRACE_CALLER, symbol, pfn, cudaVersion,
                                               flags, symbol, pfn, cudaVersion, flags, symbolStatus);
}

MEMTRACE_EXPORT cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** funcPtr, unsigned long long flags,
                                                    cudaDriverEntryPointQueryResult* driverStatus) {
  return looked_up<cudaErrorInitializationError>(real_cudaGetDriverEntryPoint, MEMTRACE_CALLER, symbol, funcPtr,
                                                 kRuntimeLookupVersion, flags, symbol, funcPtr, flags, driverStatus);
}

// The _ptsz entry points default to the per-thread default stream.
MEMTRACE_EXPORT cudaError_t cudaGetDriverEntryPoint_ptsz(const char* symbol, void** funcPtr, unsigned long long flags,
                                                         cudaDriverEntryPointQueryResult* driverStatus) {
  return looked_up<cudaErrorInitializationError>(real_cudaGetDriverEntryPoint_ptsz, MEMTRACE_CALLER, symbol, funcPtr,
                                                 kRuntimeLookupVersion, flags ? flags : kPerThreadStream, symbol,
                                                 funcPtr, flags, driverStatus);
}

MEMTRACE_EXPORT cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** funcPtr,
                                                             unsigned int cudaVersion, unsigned long long flags,
                                                             cudaDriverEntryPointQueryResult* driverStatus) {
  return looked_up<cudaErrorInitializationError>(real_cudaGetDriverEntryPointByVersion, MEMTRACE_CALLER, symbol,
                                                 funcPtr, static_cast<int>(cudaVersion), flags, symbol, funcPtr,
                                                 cudaVersion, flags, driverStatus);
}

MEMTRACE_EXPORT cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char* symbol, void** funcPtr,
                                                                  unsigned int cudaVersion, unsigned long long flags,
                                                                  cudaDriverEntryPointQueryResult* driverStatus) {
  return looked_up<cudaErrorInitializationError>(
      real_cudaGetDriverEntryPointByVersion_ptsz, MEMTRACE_CALLER, symbol, funcPtr, static_cast<int>(cudaVersion),
      flags ? flags : kPerThreadStream, symbol, funcPtr, cudaVersion, flags, driverStatus);
}
