// Modern CUDA hands out driver functions through cuGetProcAddress and the runtime's
// cudaGetDriverEntryPoint(ByVersion): NVIDIA's runtime gets every driver function it calls that
// way, PyTorch its expandable segments' cuMemCreate and cuMemMap. Symbol interposition alone misses
// those calls, so we hand out our own interposers: for each function the real lookup found, the
// one of the same ABI (its symbol's name), which then calls exactly the function the caller was
// given. So every caller gets the ABI of the version it asked for, whatever CUDA memtrace was
// built with.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstring>

#include "interpose.h"

#undef cuGetProcAddress
#undef cuIpcOpenMemHandle
#undef cuGraphAddNode

using namespace memtrace;
using namespace memtrace::inject;

extern "C" {
CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags);
CUresult cuIpcOpenMemHandle(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int Flags);
CUresult cuGraphAddNode(CUgraphNode*, CUgraph, const CUgraphNode*, size_t, CUgraphNodeParams*);
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

// Where the driver's function cannot be named (dladdr finds no exported symbol at its address):
// memtrace's interposer by the name looked up and the version asked, newest ABI first.
const Wrapped kWrapped[] = {
    {"cuInit", 2000, as_pointer(&cuInit), as_pointer(&cuInit)},
    {"cuDeviceGetCount", 2000, as_pointer(&cuDeviceGetCount), as_pointer(&cuDeviceGetCount)},
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
    {"cuGraphAddNode", 12030, as_pointer(&cuGraphAddNode_v2), as_pointer(&cuGraphAddNode_v2)},
    {"cuGraphAddNode", 12020, as_pointer(&cuGraphAddNode), as_pointer(&cuGraphAddNode)},
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

// memtrace's interposer for FN, the function a lookup of SYMBOL at VERSION with FLAGS found; null
// where memtrace interposes none.
void* interposer_for(const char* symbol, void* fn, int version, unsigned long long flags) {
  // The driver's exported function of a name (cuMemAlloc_v2, cuMemAllocAsync_ptsz, cuGraphAddNode
  // for CUDA 12.2's ABI) is memtrace's of the same name.
  Dl_info info{};
  if (::dladdr(fn, &info) && info.dli_sname && info.dli_saddr == fn && from_cuda_library(fn))
    return own_interposer(info.dli_sname);
  if (version < 0) return nullptr;  // the caller's version is not known
  for (const Wrapped& w : kWrapped) {
    if (std::strcmp(symbol, w.name) != 0 || version < w.since_version) continue;
    return (flags & kPerThreadStream) ? w.per_thread_stream : w.legacy_stream;
  }
  return nullptr;
}

// Replaces a driver function the real lookup found with our interposer for it, when we have one,
// and pins the function found for CALLER's module: our interposer, called from there, calls it.
// Anything else is handed back untouched.
void substitute(uint64_t caller, const char* symbol, void** pfn, int version, unsigned long long flags) {
  if (!symbol || !pfn || !*pfn) return;
  void* ours = interposer_for(symbol, *pfn, version, flags);
  Dl_info info{};
  if (!ours || ours == *pfn || !::dladdr(ours, &info) || !info.dli_sname) return;
  pin_real_function(info.dli_sname, caller, *pfn);
  *pfn = ours;
}

// cudaGetDriverEntryPoint asks the driver at the version of the runtime that serves it (a
// vendored CUDA 12 copy beside a CUDA 13 one): that copy's, as it says itself; -1 if it cannot.
RealFunction<decltype(&cudaRuntimeGetVersion)> real_cudaRuntimeGetVersion("cudaRuntimeGetVersion", Library::kRuntime);
int runtime_version(uint64_t caller) {
  int version = -1;
  return call_real<cudaErrorInitializationError>(real_cudaRuntimeGetVersion, caller, &version) == cudaSuccess ? version
                                                                                                              : -1;
}

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
  if (result == 0) substitute(caller, symbol, pfn, version, flags);
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
                                                 runtime_version(MEMTRACE_CALLER), flags, symbol, funcPtr, flags,
                                                 driverStatus);
}

// The _ptsz entry points default to the per-thread default stream.
MEMTRACE_EXPORT cudaError_t cudaGetDriverEntryPoint_ptsz(const char* symbol, void** funcPtr, unsigned long long flags,
                                                         cudaDriverEntryPointQueryResult* driverStatus) {
  return looked_up<cudaErrorInitializationError>(real_cudaGetDriverEntryPoint_ptsz, MEMTRACE_CALLER, symbol, funcPtr,
                                                 runtime_version(MEMTRACE_CALLER), flags ? flags : kPerThreadStream,
                                                 symbol, funcPtr, flags, driverStatus);
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
