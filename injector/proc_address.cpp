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

using namespace memtrace;
using namespace memtrace::inject;

extern "C" {
CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags);
cudaError_t cudaGetDriverEntryPoint_ptsz(const char*, void**, unsigned long long, cudaDriverEntryPointQueryResult*);
cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char*, void**, unsigned int, unsigned long long,
                                                  cudaDriverEntryPointQueryResult*);
}

namespace {

constexpr unsigned long long kPerThreadStream = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
static_assert(static_cast<int>(CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) ==
              static_cast<int>(cudaEnablePerThreadDefaultStream));

// Where the driver's function cannot be named (dladdr finds no exported symbol at its address, or
// none memtrace interposes): memtrace's interposer by the name looked up and the version asked,
// newest ABI first, by its symbol (read from memtrace's own symbols: never another library's).
struct Wrapped {
  const char* name;   // as cuGetProcAddress takes it: no _v2 or _ptsz suffix
  int since_version;  // the ABI our interposer has exists from this CUDA version on
  const char* symbol;
  const char* per_thread_symbol;  // for CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
};
const Wrapped kWrapped[] = {
    {"cuInit", 2000, "cuInit", "cuInit"},
    {"cuDeviceGetCount", 2000, "cuDeviceGetCount", "cuDeviceGetCount"},
    {"cuMemAlloc", 3020, "cuMemAlloc_v2", "cuMemAlloc_v2"},
    {"cuMemFree", 3020, "cuMemFree_v2", "cuMemFree_v2"},
    {"cuMemAllocHost", 3020, "cuMemAllocHost_v2", "cuMemAllocHost_v2"},
    {"cuMemAllocPitch", 3020, "cuMemAllocPitch_v2", "cuMemAllocPitch_v2"},
    {"cuMemHostAlloc", 2020, "cuMemHostAlloc", "cuMemHostAlloc"},
    {"cuMemFreeHost", 2000, "cuMemFreeHost", "cuMemFreeHost"},
    {"cuMemAllocManaged", 6000, "cuMemAllocManaged", "cuMemAllocManaged"},
    {"cuMemAllocAsync", 11020, "cuMemAllocAsync", "cuMemAllocAsync_ptsz"},
    {"cuMemFreeAsync", 11020, "cuMemFreeAsync", "cuMemFreeAsync_ptsz"},
    {"cuMemAllocFromPoolAsync", 11020, "cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync_ptsz"},
    {"cuMemCreate", 10020, "cuMemCreate", "cuMemCreate"},
    {"cuMemRelease", 10020, "cuMemRelease", "cuMemRelease"},
    {"cuMemMap", 10020, "cuMemMap", "cuMemMap"},
    {"cuMemUnmap", 10020, "cuMemUnmap", "cuMemUnmap"},
    {"cuMemAddressReserve", 10020, "cuMemAddressReserve", "cuMemAddressReserve"},
    {"cuMemAddressFree", 10020, "cuMemAddressFree", "cuMemAddressFree"},
    {"cuGraphAddMemAllocNode", 11040, "cuGraphAddMemAllocNode", "cuGraphAddMemAllocNode"},
    {"cuGraphAddMemFreeNode", 11040, "cuGraphAddMemFreeNode", "cuGraphAddMemFreeNode"},
    {"cuGraphAddNode", 12030, "cuGraphAddNode_v2", "cuGraphAddNode_v2"},
    {"cuGraphAddNode", 12020, "cuGraphAddNode", "cuGraphAddNode"},
    {"cuIpcOpenMemHandle", 11000, "cuIpcOpenMemHandle_v2", "cuIpcOpenMemHandle_v2"},
    {"cuIpcOpenMemHandle", 4010, "cuIpcOpenMemHandle", "cuIpcOpenMemHandle"},
    {"cuIpcCloseMemHandle", 4010, "cuIpcCloseMemHandle", "cuIpcCloseMemHandle"},
    {"cuMemPoolImportPointer", 11020, "cuMemPoolImportPointer", "cuMemPoolImportPointer"},
    {"cuMemImportFromShareableHandle", 10020, "cuMemImportFromShareableHandle", "cuMemImportFromShareableHandle"},
    {"cuMulticastCreate", 12010, "cuMulticastCreate", "cuMulticastCreate"},
    {"cuGetProcAddress", 12000, "cuGetProcAddress_v2", "cuGetProcAddress_v2"},
    {"cuGetProcAddress", 0, "cuGetProcAddress", "cuGetProcAddress"},
};

// Replaces a driver function the real lookup of SYMBOL (at VERSION, with FLAGS) found with our
// interposer of the same ABI, when we have one, and pins the function found for CALLER's module:
// our interposer, called from there, calls it. Anything else is handed back untouched.
void substitute(uint64_t caller, const char* symbol, void** pfn, int version, unsigned long long flags) {
  if (!symbol || !pfn || !*pfn) return;
  // The driver's exported function of a name (cuMemAlloc_v2, cuMemAllocAsync_ptsz, cuGraphAddNode
  // for CUDA 12.2's ABI) is memtrace's of the same name.
  Dl_info info{};
  if (::dladdr(*pfn, &info) && info.dli_sname && info.dli_saddr == *pfn) {
    void* ours = interposer_for_found(info.dli_sname, *pfn, caller);
    if (ours != *pfn) {
      *pfn = ours;
      return;
    }
  }
  if (version < 0) return;  // the caller's version is not known
  for (const Wrapped& w : kWrapped) {
    if (std::strcmp(symbol, w.name) != 0 || version < w.since_version) continue;
    *pfn = interposer_for_found((flags & kPerThreadStream) ? w.per_thread_symbol : w.symbol, *pfn, caller);
    return;
  }
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

// cudaGetDriverEntryPoint asks the driver at the version of the runtime that serves it (a
// vendored CUDA 12 copy beside a CUDA 13 one): that copy's, as it says itself; -1 if it cannot.
template <typename Fn>
int serving_runtime_version(RealFunction<Fn>& real, uint64_t caller) {
  return runtime_version_of(reinterpret_cast<const void*>(real.get(caller)));
}

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
                                                 serving_runtime_version(real_cudaGetDriverEntryPoint, MEMTRACE_CALLER),
                                                 flags, symbol, funcPtr, flags, driverStatus);
}

// The _ptsz entry points default to the per-thread default stream.
MEMTRACE_EXPORT cudaError_t cudaGetDriverEntryPoint_ptsz(const char* symbol, void** funcPtr, unsigned long long flags,
                                                         cudaDriverEntryPointQueryResult* driverStatus) {
  return looked_up<cudaErrorInitializationError>(
      real_cudaGetDriverEntryPoint_ptsz, MEMTRACE_CALLER, symbol, funcPtr,
      serving_runtime_version(real_cudaGetDriverEntryPoint_ptsz, MEMTRACE_CALLER), flags ? flags : kPerThreadStream,
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
