// Memory shared between processes on the simulated device, and the queries memtrace makes about
// it: IPC handles to allocations, pool allocations exported and imported by pointer, physical
// memory exported and imported as POSIX file descriptors, and multicast objects.
//
// An IPC handle (and a pool pointer's export data) names the exporting process, the allocation
// and its device. Opening it in another process gives addresses of their own (on the same device,
// in no use by the opener) that share no contents with the exporter's: the simulated device's
// memory is each process's own. Physical memory shared by file descriptor does share its contents
// (it is a memfd). One simplification: any device allocation can be exported by pointer, not only
// one from a pool made exportable.
#include <cuda.h>
#include <cupti.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

#include "api_callbacks.h"
#include "driver_objects.h"
#include "ledger.h"

#undef cuIpcOpenMemHandle
extern "C" CUresult cuIpcOpenMemHandle(CUdeviceptr*, CUipcMemHandle, unsigned int);

namespace {

constexpr int kDriverApi = CUPTI_CB_DOMAIN_DRIVER_API;
constexpr char kIpcMagic[8] = {'m', 't', 's', 'i', 'm', 'i', 'p', 'c'};
constexpr char kPoolPointerMagic[8] = {'m', 't', 's', 'i', 'm', 'p', 'p', 't'};

// What a CUipcMemHandle's 64 bytes (and a CUmemPoolPtrExportData's) hold here.
struct IpcHandle {
  char magic[8];
  int64_t pid;
  uint64_t addr;
  uint64_t size;
  int32_t device;
};
static_assert(sizeof(IpcHandle) <= sizeof(CUipcMemHandle) && sizeof(IpcHandle) <= sizeof(CUmemPoolPtrExportData));

using sim_driver::to_result;

// Describes the device allocation that starts at DPTR into OUT (64 bytes).
CUresult export_allocation(const char (&magic)[8], CUdeviceptr dptr, unsigned char* out) {
  if (!sim_driver::initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  uint64_t base = 0, size = 0;
  sim::Memory memory;
  int device = -1;
  if (sim::address_range(dptr, &base, &size, &memory) != sim::Status::kOk || base != dptr ||
      memory != sim::Memory::kDevice || sim::pointer_device(dptr, &device) != sim::Status::kOk)
    return CUDA_ERROR_INVALID_VALUE;
  IpcHandle h{};
  std::memcpy(h.magic, magic, sizeof magic);
  h.pid = ::getpid();
  h.addr = dptr;
  h.size = size;
  h.device = device;
  std::memset(out, 0, 64);
  std::memcpy(out, &h, sizeof h);
  return CUDA_SUCCESS;
}

// Opens what export_allocation described in another process, ledgered as API.
CUresult import_allocation(const char* api, const char (&magic)[8], const unsigned char* data, CUdeviceptr* pdptr,
                           bool valid_flags) {
  sim::ApiCall call(api);
  if (!sim_driver::initialized()) return call.done(CUDA_ERROR_NOT_INITIALIZED);
  IpcHandle h;
  std::memcpy(&h, data, sizeof h);
  if (!pdptr || !valid_flags || std::memcmp(h.magic, magic, sizeof magic) != 0)
    return call.done(CUDA_ERROR_INVALID_VALUE);
  if (h.pid == ::getpid()) return call.done(CUDA_ERROR_INVALID_CONTEXT);  // a process cannot open its own
  uint64_t addr = 0;
  CUresult r = to_result(sim::allocate(sim::Memory::kImported, h.device, h.size, &addr));
  if (r == CUDA_SUCCESS) *pdptr = addr;
  return call.done(r, h.size);
}

CUresult ipc_open(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int flags) {
  return import_allocation("cuIpcOpenMemHandle", kIpcMagic, reinterpret_cast<const unsigned char*>(handle.reserved),
                           pdptr, !(flags & ~CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
}

}  // namespace

extern "C" {

CUresult cuIpcGetMemHandle(CUipcMemHandle* handle, CUdeviceptr dptr) {
  if (!handle) return CUDA_ERROR_INVALID_VALUE;
  return export_allocation(kIpcMagic, dptr, reinterpret_cast<unsigned char*>(handle->reserved));
}

CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int flags) {
  return sim::traced(kDriverApi, CUPTI_DRIVER_TRACE_CBID_cuIpcOpenMemHandle_v2, "cuIpcOpenMemHandle_v2",
                     cuIpcOpenMemHandle_v2_params{pdptr, handle, flags},
                     [&] { return ipc_open(pdptr, handle, flags); });
}

// The CUDA 4 ABI, which NVIDIA's runtime 13.0 still asks for (at 4010): the same here.
CUresult cuIpcOpenMemHandle(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int flags) {
  return sim::traced(kDriverApi, CUPTI_DRIVER_TRACE_CBID_cuIpcOpenMemHandle, "cuIpcOpenMemHandle",
                     cuIpcOpenMemHandle_params{pdptr, handle, flags}, [&] { return ipc_open(pdptr, handle, flags); });
}

// A stream-ordered allocation shared by pointer: its export data, opened in another process with
// one of its pools, and freed there by cuMemFree(Async).
CUresult cuMemPoolExportPointer(CUmemPoolPtrExportData* data, CUdeviceptr dptr) {
  if (!data) return CUDA_ERROR_INVALID_VALUE;
  return export_allocation(kPoolPointerMagic, dptr, data->reserved);
}

CUresult cuMemPoolImportPointer(CUdeviceptr* ptr, CUmemoryPool pool, CUmemPoolPtrExportData* data) {
  return sim::traced(kDriverApi, CUPTI_DRIVER_TRACE_CBID_cuMemPoolImportPointer, "cuMemPoolImportPointer",
                     cuMemPoolImportPointer_params{ptr, pool, data}, [&] {
                       return data ? import_allocation("cuMemPoolImportPointer", kPoolPointerMagic, data->reserved, ptr,
                                                       pool != nullptr)
                                   : CUDA_ERROR_INVALID_VALUE;
                     });
}

CUresult cuIpcCloseMemHandle(CUdeviceptr dptr) {
  return sim::traced(kDriverApi, CUPTI_DRIVER_TRACE_CBID_cuIpcCloseMemHandle, "cuIpcCloseMemHandle",
                     cuIpcCloseMemHandle_params{dptr}, [&] {
                       sim::ApiCall call("cuIpcCloseMemHandle");
                       if (!sim_driver::initialized()) return call.done(CUDA_ERROR_NOT_INITIALIZED);
                       uint64_t base = 0, size = 0;
                       sim::Memory memory;
                       if (sim::address_range(dptr, &base, &size, &memory) != sim::Status::kOk || base != dptr ||
                           memory != sim::Memory::kImported)
                         return call.done(CUDA_ERROR_INVALID_VALUE);
                       return call.done(to_result(sim::release(dptr, false, &size)), size);
                     });
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr* pbase, size_t* psize, CUdeviceptr dptr) {
  if (!sim_driver::initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  uint64_t base = 0, size = 0;
  if (sim::address_range(dptr, &base, &size) != sim::Status::kOk) return CUDA_ERROR_NOT_FOUND;
  if (pbase) *pbase = base;
  if (psize) *psize = size;
  return CUDA_SUCCESS;
}

CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop, CUmemGenericAllocationHandle handle) {
  if (!prop) return CUDA_ERROR_INVALID_VALUE;
  int device = -1;
  if (sim::vmm_handle_device(handle, &device) != sim::Status::kOk || device < 0) return CUDA_ERROR_INVALID_VALUE;
  *prop = CUmemAllocationProp{};
  prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop->location.id = device;
  prop->requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return CUDA_SUCCESS;
}

CUresult cuMemExportToShareableHandle(void* shareable, CUmemGenericAllocationHandle handle,
                                      CUmemAllocationHandleType type, unsigned long long flags) {
  if (!shareable || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  return to_result(sim::vmm_export(handle, static_cast<int*>(shareable)));
}

CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle, void* os_handle,
                                        CUmemAllocationHandleType type) {
  return sim::traced(kDriverApi, CUPTI_DRIVER_TRACE_CBID_cuMemImportFromShareableHandle,
                     "cuMemImportFromShareableHandle", cuMemImportFromShareableHandle_params{handle, os_handle, type},
                     [&] {
                       sim::ApiCall call("cuMemImportFromShareableHandle");
                       if (!sim_driver::initialized()) return call.done(CUDA_ERROR_NOT_INITIALIZED);
                       if (!handle) return call.done(CUDA_ERROR_INVALID_VALUE);
                       if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return call.done(CUDA_ERROR_NOT_SUPPORTED);
                       // The file descriptor travels in the pointer's bits, as NVIDIA's driver takes it.
                       const int fd = static_cast<int>(reinterpret_cast<intptr_t>(os_handle));
                       uint64_t id = 0;
                       CUresult r = to_result(sim::vmm_import(fd, &id));
                       if (r == CUDA_SUCCESS) *handle = id;
                       return call.done(r);
                     });
}

CUresult cuMulticastCreate(CUmemGenericAllocationHandle* handle, const CUmulticastObjectProp* prop) {
  return sim::traced(
      kDriverApi, CUPTI_DRIVER_TRACE_CBID_cuMulticastCreate, "cuMulticastCreate",
      cuMulticastCreate_params{handle, prop}, [&] {
        sim::ApiCall call("cuMulticastCreate");
        if (!sim_driver::initialized()) return call.done(CUDA_ERROR_NOT_INITIALIZED);
        if (!handle || !prop || prop->numDevices == 0 || static_cast<int>(prop->numDevices) > sim::device_count())
          return call.done(CUDA_ERROR_INVALID_VALUE);
        uint64_t id = 0;
        CUresult r = to_result(sim::multicast_create(prop->size, &id));
        if (r == CUDA_SUCCESS) *handle = id;
        return call.done(r, prop->size);
      });
}

CUresult cuMulticastGetGranularity(size_t* granularity, const CUmulticastObjectProp* prop,
                                   CUmulticastGranularity_flags) {
  if (!granularity || !prop) return CUDA_ERROR_INVALID_VALUE;
  *granularity = sim::kVmmGranularity;
  return CUDA_SUCCESS;
}

}  // extern "C"
