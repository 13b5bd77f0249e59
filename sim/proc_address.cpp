// How the simulated driver hands its functions out: cuGetProcAddress(_v2), the way NVIDIA's runtime
// (and PyTorch, NCCL, and the runtime's cudaGetDriverEntryPoint) reach every driver function, and
// cuGetExportTable, the way runtimes reach the driver's private tables.
#include <cuda.h>
#include <dlfcn.h>

#include <cstring>
#include <string>

#include "api_callbacks.h"
#include "device_model.h"
#include "driver_requests.h"
#include "export_tables.h"
#include "ledger.h"

#undef cuGetProcAddress

namespace {

// One ABI of a driver function: the CUDA version it appeared in and the symbol it has.
struct Abi {
  int since;
  const char* symbol;
};
// Every function this driver hands out, by the name cuGetProcAddress takes, with its ABIs newest
// first. The versions are those of cudaTypedefs.h 13.0 (PFN_<name>_v<version>), the symbols those
// of cuda.h 13.0 (its #define of each name to its newest ABI, and the declarations of the older
// ones it keeps for the driver's own build); ABIs this device does not implement are left out.
struct Offered {
  const char* name;
  Abi abis[2];
};
constexpr Offered kOffered[] = {
    {"cuInit", {{2000, "cuInit"}}},
    {"cuDriverGetVersion", {{2020, "cuDriverGetVersion"}}},
    {"cuGetProcAddress", {{12000, "cuGetProcAddress_v2"}, {11030, "cuGetProcAddress"}}},
    {"cuGetExportTable", {{3000, "cuGetExportTable"}}},
    {"cuGetErrorName", {{6000, "cuGetErrorName"}}},
    {"cuGetErrorString", {{6000, "cuGetErrorString"}}},
    {"cuDeviceGet", {{2000, "cuDeviceGet"}}},
    {"cuDeviceGetCount", {{2000, "cuDeviceGetCount"}}},
    {"cuDeviceGetName", {{2000, "cuDeviceGetName"}}},
    {"cuDeviceGetUuid", {{11040, "cuDeviceGetUuid_v2"}}},
    {"cuDeviceTotalMem", {{3020, "cuDeviceTotalMem_v2"}}},
    {"cuDeviceGetAttribute", {{2000, "cuDeviceGetAttribute"}}},
    {"cuDeviceGetDefaultMemPool", {{11020, "cuDeviceGetDefaultMemPool"}}},
    {"cuDeviceGetMemPool", {{11020, "cuDeviceGetMemPool"}}},
    {"cuDevicePrimaryCtxRetain", {{7000, "cuDevicePrimaryCtxRetain"}}},
    {"cuDevicePrimaryCtxRelease", {{11000, "cuDevicePrimaryCtxRelease_v2"}, {7000, "cuDevicePrimaryCtxRelease"}}},
    {"cuDevicePrimaryCtxGetState", {{7000, "cuDevicePrimaryCtxGetState"}}},
    {"cuDevicePrimaryCtxReset", {{11000, "cuDevicePrimaryCtxReset_v2"}, {7000, "cuDevicePrimaryCtxReset"}}},
    {"cuCtxCreate", {{12050, "cuCtxCreate_v4"}}},
    {"cuCtxDestroy", {{4000, "cuCtxDestroy_v2"}}},
    {"cuCtxSetCurrent", {{4000, "cuCtxSetCurrent"}}},
    {"cuCtxGetCurrent", {{4000, "cuCtxGetCurrent"}}},
    {"cuCtxPushCurrent", {{4000, "cuCtxPushCurrent_v2"}}},
    {"cuCtxPopCurrent", {{4000, "cuCtxPopCurrent_v2"}}},
    {"cuCtxGetDevice", {{2000, "cuCtxGetDevice"}}},
    {"cuCtxSynchronize", {{2000, "cuCtxSynchronize"}}},
    {"cuMemGetInfo", {{3020, "cuMemGetInfo_v2"}}},
    {"cuMemAlloc", {{3020, "cuMemAlloc_v2"}}},
    {"cuMemAllocPitch", {{3020, "cuMemAllocPitch_v2"}}},
    {"cuMemAllocManaged", {{6000, "cuMemAllocManaged"}}},
    {"cuMemFree", {{3020, "cuMemFree_v2"}}},
    {"cuMemAllocHost", {{3020, "cuMemAllocHost_v2"}}},
    {"cuMemHostAlloc", {{2020, "cuMemHostAlloc"}}},
    {"cuMemFreeHost", {{2000, "cuMemFreeHost"}}},
    {"cuMemGetAddressRange", {{3020, "cuMemGetAddressRange_v2"}}},
    {"cuMemAllocAsync", {{11020, "cuMemAllocAsync"}}},
    {"cuMemAllocFromPoolAsync", {{11020, "cuMemAllocFromPoolAsync"}}},
    {"cuMemFreeAsync", {{11020, "cuMemFreeAsync"}}},
    {"cuMemPoolCreate", {{11020, "cuMemPoolCreate"}}},
    {"cuMemPoolDestroy", {{11020, "cuMemPoolDestroy"}}},
    {"cuMemPoolTrimTo", {{11020, "cuMemPoolTrimTo"}}},
    {"cuMemPoolGetAttribute", {{11020, "cuMemPoolGetAttribute"}}},
    {"cuMemPoolSetAttribute", {{11020, "cuMemPoolSetAttribute"}}},
    {"cuMemPoolExportPointer", {{11020, "cuMemPoolExportPointer"}}},
    {"cuMemPoolImportPointer", {{11020, "cuMemPoolImportPointer"}}},
    {"cuMemCreate", {{10020, "cuMemCreate"}}},
    {"cuMemRelease", {{10020, "cuMemRelease"}}},
    {"cuMemAddressReserve", {{10020, "cuMemAddressReserve"}}},
    {"cuMemAddressFree", {{10020, "cuMemAddressFree"}}},
    {"cuMemMap", {{10020, "cuMemMap"}}},
    {"cuMemUnmap", {{10020, "cuMemUnmap"}}},
    {"cuMemSetAccess", {{10020, "cuMemSetAccess"}}},
    {"cuMemGetAllocationGranularity", {{10020, "cuMemGetAllocationGranularity"}}},
    {"cuMemGetAllocationPropertiesFromHandle", {{10020, "cuMemGetAllocationPropertiesFromHandle"}}},
    {"cuMemExportToShareableHandle", {{10020, "cuMemExportToShareableHandle"}}},
    {"cuMemImportFromShareableHandle", {{10020, "cuMemImportFromShareableHandle"}}},
    {"cuMulticastCreate", {{12010, "cuMulticastCreate"}}},
    {"cuMulticastGetGranularity", {{12010, "cuMulticastGetGranularity"}}},
    {"cuIpcGetMemHandle", {{4010, "cuIpcGetMemHandle"}}},
    {"cuIpcOpenMemHandle", {{11000, "cuIpcOpenMemHandle_v2"}, {4010, "cuIpcOpenMemHandle"}}},
    {"cuIpcCloseMemHandle", {{4010, "cuIpcCloseMemHandle"}}},
    {"cuPointerGetAttribute", {{4000, "cuPointerGetAttribute"}}},
    {"cuMemcpy", {{4000, "cuMemcpy"}}},
    {"cuMemsetD8", {{3020, "cuMemsetD8_v2"}}},
    {"cuLaunchKernel", {{4000, "cuLaunchKernel"}}},
    {"cuStreamCreate", {{2000, "cuStreamCreate"}}},
    {"cuStreamDestroy", {{4000, "cuStreamDestroy_v2"}}},
    {"cuStreamSynchronize", {{2000, "cuStreamSynchronize"}}},
    {"cuStreamBeginCapture", {{10010, "cuStreamBeginCapture_v2"}}},
    {"cuStreamEndCapture", {{10000, "cuStreamEndCapture"}}},
    {"cuStreamIsCapturing", {{10000, "cuStreamIsCapturing"}}},
    {"cuGraphCreate", {{10000, "cuGraphCreate"}}},
    {"cuGraphDestroy", {{10000, "cuGraphDestroy"}}},
    {"cuGraphAddNode", {{12030, "cuGraphAddNode_v2"}, {12020, "cuGraphAddNode"}}},
    {"cuGraphNodeSetParams", {{12020, "cuGraphNodeSetParams"}}},
    {"cuGraphExecNodeSetParams", {{12020, "cuGraphExecNodeSetParams"}}},
    {"cuGraphAddMemAllocNode", {{11040, "cuGraphAddMemAllocNode"}}},
    {"cuGraphAddMemFreeNode", {{11040, "cuGraphAddMemFreeNode"}}},
    {"cuGraphMemAllocNodeGetParams", {{11040, "cuGraphMemAllocNodeGetParams"}}},
    {"cuGraphInstantiateWithFlags", {{11040, "cuGraphInstantiateWithFlags"}}},
    {"cuGraphLaunch", {{10000, "cuGraphLaunch"}}},
    {"cuGraphExecDestroy", {{10000, "cuGraphExecDestroy"}}},
    {"cuDeviceGetGraphMemAttribute", {{11040, "cuDeviceGetGraphMemAttribute"}}},
    {"cuDeviceGraphMemTrim", {{11040, "cuDeviceGraphMemTrim"}}},
};

// The ABI of NAME a caller of CUDA version VERSION gets: the newest one it knows.
const Abi* abi_for(const char* name, int version, bool& known) {
  known = false;
  for (const Offered& f : kOffered) {
    if (std::strcmp(f.name, name) != 0) continue;
    known = true;
    for (const Abi& abi : f.abis)
      if (abi.symbol && abi.since <= version) return &abi;
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
  }
  if (status)
    *status = *pfn    ? CU_GET_PROC_ADDRESS_SUCCESS
              : known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                      : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  sim::log_lookup(symbol, version, flags, *pfn != nullptr);
  return *pfn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

// The simulated device's own table for the runtime (export_tables.h).
const sim::SimHooks kHooks = {sizeof(sim::SimHooks), memtrace_sim_enter, memtrace_sim_leave, memtrace_sim_api_event,
                              memtrace_sim_allocation_size};

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

// Only the simulated device's own table: NVIDIA's private ones are not this driver's to give.
CUresult cuGetExportTable(const void** table, const CUuuid* id) {
  if (!table || !id) return CUDA_ERROR_INVALID_VALUE;
  const bool ours = std::memcmp(id, &sim::kSimHooksTable, sizeof *id) == 0;
  *table = ours ? &kHooks : nullptr;
  sim::log_export_table(id, ours);
  return ours ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

}  // extern "C"
