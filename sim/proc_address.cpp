// How the simulated driver hands its functions out: cuGetProcAddress(_v2), the way NVIDIA's runtime
// (and PyTorch, NCCL, and the runtime's cudaGetDriverEntryPoint) reach every driver function, and
// cuGetExportTable, the way runtimes reach the driver's private tables.
// Every ABI by its own symbol name, as cuda.h declares them for the driver's own build (no #define
// of a name to its newest ABI), and the PFN types of the older ones.
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

#include "api_callbacks.h"
#include "device_model.h"
#include "driver_objects.h"
#include "driver_requests.h"
#include "export_tables.h"
#include "ledger.h"

namespace {

// Every function this driver hands out, by the name cuGetProcAddress takes: each ABI it has, the
// CUDA version that ABI appeared in and its symbol, newest first. The versions are those of
// cudaTypedefs.h 13.0 (PFN_<name>_v<version>), the symbols those of cuda.h 13.0 (its #define of
// each name to its newest ABI, and the older ones it keeps for the driver's own build); each
// symbol's type is checked against its version's PFN type below. ABIs this device does not
// implement are left out.
#define SIM_DRIVER_ABIS(X)                                                                 \
  X(cuInit, 2000, cuInit)                                                                  \
  X(cuDriverGetVersion, 2020, cuDriverGetVersion)                                          \
  X(cuGetProcAddress, 12000, cuGetProcAddress_v2)                                          \
  X(cuGetProcAddress, 11030, cuGetProcAddress)                                             \
  X(cuGetExportTable, 3000, cuGetExportTable)                                              \
  X(cuGetErrorName, 6000, cuGetErrorName)                                                  \
  X(cuGetErrorString, 6000, cuGetErrorString)                                              \
  X(cuDeviceGet, 2000, cuDeviceGet)                                                        \
  X(cuDeviceGetCount, 2000, cuDeviceGetCount)                                              \
  X(cuDeviceGetName, 2000, cuDeviceGetName)                                                \
  X(cuDeviceGetUuid, 11040, cuDeviceGetUuid_v2)                                            \
  X(cuDeviceTotalMem, 3020, cuDeviceTotalMem_v2)                                           \
  X(cuDeviceGetAttribute, 2000, cuDeviceGetAttribute)                                      \
  X(cuDeviceGetDefaultMemPool, 11020, cuDeviceGetDefaultMemPool)                           \
  X(cuDeviceGetMemPool, 11020, cuDeviceGetMemPool)                                         \
  X(cuDevicePrimaryCtxRetain, 7000, cuDevicePrimaryCtxRetain)                              \
  X(cuDevicePrimaryCtxRelease, 11000, cuDevicePrimaryCtxRelease_v2)                        \
  X(cuDevicePrimaryCtxRelease, 7000, cuDevicePrimaryCtxRelease)                            \
  X(cuDevicePrimaryCtxGetState, 7000, cuDevicePrimaryCtxGetState)                          \
  X(cuDevicePrimaryCtxReset, 11000, cuDevicePrimaryCtxReset_v2)                            \
  X(cuDevicePrimaryCtxReset, 7000, cuDevicePrimaryCtxReset)                                \
  X(cuCtxCreate, 12050, cuCtxCreate_v4)                                                    \
  X(cuCtxDestroy, 4000, cuCtxDestroy_v2)                                                   \
  X(cuCtxSetCurrent, 4000, cuCtxSetCurrent)                                                \
  X(cuCtxGetCurrent, 4000, cuCtxGetCurrent)                                                \
  X(cuCtxPushCurrent, 4000, cuCtxPushCurrent_v2)                                           \
  X(cuCtxPopCurrent, 4000, cuCtxPopCurrent_v2)                                             \
  X(cuCtxGetDevice, 2000, cuCtxGetDevice)                                                  \
  X(cuCtxSynchronize, 2000, cuCtxSynchronize)                                              \
  X(cuMemGetInfo, 3020, cuMemGetInfo_v2)                                                   \
  X(cuMemAlloc, 3020, cuMemAlloc_v2)                                                       \
  X(cuMemAllocPitch, 3020, cuMemAllocPitch_v2)                                             \
  X(cuMemAllocManaged, 6000, cuMemAllocManaged)                                            \
  X(cuMemFree, 3020, cuMemFree_v2)                                                         \
  X(cuMemAllocHost, 3020, cuMemAllocHost_v2)                                               \
  X(cuMemHostAlloc, 2020, cuMemHostAlloc)                                                  \
  X(cuMemFreeHost, 2000, cuMemFreeHost)                                                    \
  X(cuMemGetAddressRange, 3020, cuMemGetAddressRange_v2)                                   \
  X(cuMemAllocAsync, 11020, cuMemAllocAsync)                                               \
  X(cuMemAllocFromPoolAsync, 11020, cuMemAllocFromPoolAsync)                               \
  X(cuMemFreeAsync, 11020, cuMemFreeAsync)                                                 \
  X(cuMemPoolCreate, 11020, cuMemPoolCreate)                                               \
  X(cuMemPoolDestroy, 11020, cuMemPoolDestroy)                                             \
  X(cuMemPoolTrimTo, 11020, cuMemPoolTrimTo)                                               \
  X(cuMemPoolGetAttribute, 11020, cuMemPoolGetAttribute)                                   \
  X(cuMemPoolSetAttribute, 11020, cuMemPoolSetAttribute)                                   \
  X(cuMemPoolExportPointer, 11020, cuMemPoolExportPointer)                                 \
  X(cuMemPoolImportPointer, 11020, cuMemPoolImportPointer)                                 \
  X(cuMemCreate, 10020, cuMemCreate)                                                       \
  X(cuMemRelease, 10020, cuMemRelease)                                                     \
  X(cuMemAddressReserve, 10020, cuMemAddressReserve)                                       \
  X(cuMemAddressFree, 10020, cuMemAddressFree)                                             \
  X(cuMemMap, 10020, cuMemMap)                                                             \
  X(cuMemUnmap, 10020, cuMemUnmap)                                                         \
  X(cuMemSetAccess, 10020, cuMemSetAccess)                                                 \
  X(cuMemGetAllocationGranularity, 10020, cuMemGetAllocationGranularity)                   \
  X(cuMemGetAllocationPropertiesFromHandle, 10020, cuMemGetAllocationPropertiesFromHandle) \
  X(cuMemExportToShareableHandle, 10020, cuMemExportToShareableHandle)                     \
  X(cuMemImportFromShareableHandle, 10020, cuMemImportFromShareableHandle)                 \
  X(cuMulticastCreate, 12010, cuMulticastCreate)                                           \
  X(cuMulticastGetGranularity, 12010, cuMulticastGetGranularity)                           \
  X(cuIpcGetMemHandle, 4010, cuIpcGetMemHandle)                                            \
  X(cuIpcOpenMemHandle, 11000, cuIpcOpenMemHandle_v2)                                      \
  X(cuIpcOpenMemHandle, 4010, cuIpcOpenMemHandle)                                          \
  X(cuIpcCloseMemHandle, 4010, cuIpcCloseMemHandle)                                        \
  X(cuPointerGetAttribute, 4000, cuPointerGetAttribute)                                    \
  X(cuMemcpy, 4000, cuMemcpy)                                                              \
  X(cuMemsetD8, 3020, cuMemsetD8_v2)                                                       \
  X(cuLaunchKernel, 4000, cuLaunchKernel)                                                  \
  X(cuStreamCreate, 2000, cuStreamCreate)                                                  \
  X(cuStreamDestroy, 4000, cuStreamDestroy_v2)                                             \
  X(cuStreamSynchronize, 2000, cuStreamSynchronize)                                        \
  X(cuStreamBeginCapture, 10010, cuStreamBeginCapture_v2)                                  \
  X(cuStreamEndCapture, 10000, cuStreamEndCapture)                                         \
  X(cuStreamIsCapturing, 10000, cuStreamIsCapturing)                                       \
  X(cuGraphCreate, 10000, cuGraphCreate)                                                   \
  X(cuGraphDestroy, 10000, cuGraphDestroy)                                                 \
  X(cuGraphAddNode, 12030, cuGraphAddNode_v2)                                              \
  X(cuGraphAddNode, 12020, cuGraphAddNode)                                                 \
  X(cuGraphNodeSetParams, 12020, cuGraphNodeSetParams)                                     \
  X(cuGraphExecNodeSetParams, 12020, cuGraphExecNodeSetParams)                             \
  X(cuGraphAddMemAllocNode, 11040, cuGraphAddMemAllocNode)                                 \
  X(cuGraphAddMemFreeNode, 11040, cuGraphAddMemFreeNode)                                   \
  X(cuGraphMemAllocNodeGetParams, 11040, cuGraphMemAllocNodeGetParams)                     \
  X(cuGraphInstantiateWithFlags, 11040, cuGraphInstantiateWithFlags)                       \
  X(cuGraphLaunch, 10000, cuGraphLaunch)                                                   \
  X(cuGraphExecDestroy, 10000, cuGraphExecDestroy)                                         \
  X(cuDeviceGetGraphMemAttribute, 11040, cuDeviceGetGraphMemAttribute)                     \
  X(cuDeviceGraphMemTrim, 11040, cuDeviceGraphMemTrim)

struct Abi {
  const char* name;
  int since;
  const char* symbol;
};
constexpr Abi kAbis[] = {
#define SIM_DRIVER_ABI_ROW(name, since, symbol) {#name, since, #symbol},
    SIM_DRIVER_ABIS(SIM_DRIVER_ABI_ROW)
#undef SIM_DRIVER_ABI_ROW
};
#define SIM_DRIVER_ABI_TYPE(name, since, symbol)                            \
  static_assert(std::is_same_v<PFN_##name##_v##since, decltype(&::symbol)>, \
                #symbol " is not the ABI cudaTypedefs.h gives " #name " at " #since);
SIM_DRIVER_ABIS(SIM_DRIVER_ABI_TYPE)
#undef SIM_DRIVER_ABI_TYPE

// The ABI of NAME a caller of CUDA version VERSION gets: the newest one it knows.
const Abi* abi_for(const char* name, int version, bool& known) {
  known = false;
  for (const Abi& abi : kAbis) {
    if (std::strcmp(abi.name, name) != 0) continue;
    known = true;
    if (abi.since <= version) return &abi;
  }
  return nullptr;
}

void own_library_marker() {}

// NVIDIA's driver hands out its own functions' addresses, which no interposer of dlsym sees: so
// does this one, through libc's dlsym by its version (an unversioned dlsym may be memtrace's), on
// its own handle (the global scope would find an interposer's definition first).
void* own_symbol(const std::string& name) {
  using Dlsym = void* (*)(void*, const char*);
  static const Dlsym libc_dlsym = [] {
    auto fn = reinterpret_cast<Dlsym>(::dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.34"));
    return fn ? fn : reinterpret_cast<Dlsym>(::dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.2.5"));
  }();
  static void* self = [] {
    Dl_info info{};  // found by a function of ours no one interposes (&cuInit may be memtrace's)
    ::dladdr(reinterpret_cast<void*>(&own_library_marker), &info);
    return ::dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
  }();
  return self && libc_dlsym ? libc_dlsym(self, name.c_str()) : nullptr;
}

// MEMTRACE_SIM_UNNAMED_PROC_ADDRESSES=1: the allocation functions are handed out as entry points of
// their own that no exported symbol names (dladdr finds none at their address), as a driver may hand
// out internal functions: whether NVIDIA's does is not known here. So the tests also take the way
// memtrace finds its interposer for a function it cannot name (by the name looked up and the
// version asked).
template <auto kFunction>
struct Unnamed;
template <typename Result, typename... Args, Result (*kFunction)(Args...)>
struct Unnamed<kFunction> {
  static Result call(Args... args) { return kFunction(args...); }
};
#define SIM_UNNAMED(symbol) \
  { #symbol, reinterpret_cast < void*>(&Unnamed <&::symbol>::call) }
struct UnnamedEntry {
  const char* symbol;
  void* entry;
};
const UnnamedEntry kUnnamed[] = {
    SIM_UNNAMED(cuInit),
    SIM_UNNAMED(cuDeviceGetCount),
    SIM_UNNAMED(cuGetProcAddress_v2),
    SIM_UNNAMED(cuMemAlloc_v2),
    SIM_UNNAMED(cuMemFree_v2),
    SIM_UNNAMED(cuMemAllocPitch_v2),
    SIM_UNNAMED(cuMemAllocManaged),
    SIM_UNNAMED(cuMemHostAlloc),
    SIM_UNNAMED(cuMemFreeHost),
    SIM_UNNAMED(cuMemAllocAsync),
    SIM_UNNAMED(cuMemAllocAsync_ptsz),
    SIM_UNNAMED(cuMemFreeAsync),
    SIM_UNNAMED(cuMemFreeAsync_ptsz),
    SIM_UNNAMED(cuMemAllocFromPoolAsync),
    SIM_UNNAMED(cuMemAllocFromPoolAsync_ptsz),
    SIM_UNNAMED(cuMemCreate),
    SIM_UNNAMED(cuMemRelease),
    SIM_UNNAMED(cuMemMap),
    SIM_UNNAMED(cuMemUnmap),
    SIM_UNNAMED(cuMemAddressReserve),
    SIM_UNNAMED(cuMemAddressFree),
    SIM_UNNAMED(cuGraphAddMemAllocNode),
    SIM_UNNAMED(cuGraphAddMemFreeNode),
    SIM_UNNAMED(cuGraphAddNode_v2),
    SIM_UNNAMED(cuGraphAddNode),
    SIM_UNNAMED(cuIpcOpenMemHandle_v2),
    SIM_UNNAMED(cuIpcCloseMemHandle),
    SIM_UNNAMED(cuMemPoolImportPointer),
};
#undef SIM_UNNAMED

void* unnamed_if_asked(void* fn) {
  static const bool unnamed = [] {
    const char* v = ::secure_getenv("MEMTRACE_SIM_UNNAMED_PROC_ADDRESSES");
    return v && std::strcmp(v, "1") == 0;
  }();
  if (!unnamed || !fn) return fn;
  for (const UnnamedEntry& e : kUnnamed)
    if (own_symbol(e.symbol) == fn) return e.entry;
  return fn;
}

CUresult get_proc_address(const char* symbol, void** pfn, int version, cuuint64_t flags,
                          CUdriverProcAddressQueryResult* status) {
  if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  bool known = false;
  const Abi* abi = abi_for(symbol, version, known);
  if (abi) {
    // The per-thread default stream's form where the caller asks for it and the function has one
    // (cuMemAllocAsync_ptsz; cuMemcpy's is cuMemcpy_ptds), else the function itself.
    if (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)
      for (const char* suffix : {"_ptsz", "_ptds"})
        if (!*pfn) *pfn = own_symbol(std::string(abi->symbol) + suffix);
    if (!*pfn) *pfn = own_symbol(abi->symbol);
    *pfn = unnamed_if_asked(*pfn);
  }
  if (status)
    *status = *pfn    ? CU_GET_PROC_ADDRESS_SUCCESS
              : known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                      : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  sim::log_lookup(symbol, version, flags, *pfn != nullptr);
  return *pfn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

// The simulated device's own tables (export_tables.h): the runtime's and CUPTI's.
const sim::SimHooks kHooks = {sizeof(sim::SimHooks), memtrace_sim_enter, memtrace_sim_leave, memtrace_sim_api_event,
                              memtrace_sim_allocation_size};
int driver_initialized() { return sim_driver::initialized() ? 1 : 0; }
const sim::SimCuptiHooks kCuptiHooks = {sizeof(sim::SimCuptiHooks), memtrace_sim_set_api_callback,
                                        memtrace_sim_set_memory_activity, driver_initialized};

}  // namespace

const sim::SimHooks& sim::hooks() { return kHooks; }

extern "C" {

CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* symbolStatus) {
  return get_proc_address(symbol, pfn, cudaVersion, flags, symbolStatus);
}

CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  return get_proc_address(symbol, pfn, cudaVersion, flags, nullptr);
}

// Only the simulated device's own tables: NVIDIA's private ones are not this driver's to give.
CUresult cuGetExportTable(const void** table, const CUuuid* id) {
  if (!table || !id) return CUDA_ERROR_INVALID_VALUE;
  *table = std::memcmp(id, &sim::kSimHooksTable, sizeof *id) == 0   ? static_cast<const void*>(&kHooks)
           : std::memcmp(id, &sim::kSimCuptiTable, sizeof *id) == 0 ? static_cast<const void*>(&kCuptiHooks)
                                                                    : nullptr;
  sim::log_export_table(id, *table != nullptr);
  return *table ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

}  // extern "C"
