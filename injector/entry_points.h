// Every entry point of cuda.h and cuda_runtime_api.h (CUDA 13.0) that makes, frees, maps, imports
// or exports memory, and what memtrace does with it: recorded (by an interposer of that name and by
// CUPTI's callback for it, as the API it names), or not, and why. EntryPoints.EveryMemoryEntryPoint
// OfTheHeadersIsDecided holds it against the installed headers: a new such function in them fails
// the test until it is decided here; a recorded one must be exported by the injector and
// implemented by the simulated runtime or driver.
#pragma once

#include <string_view>

#include "memtrace/format/api.h"

namespace memtrace::inject {

struct MemoryEntryPoint {
  std::string_view name;  // as the header declares it (cuda.h's macros give the ABI's symbol)
  Api recorded_as;        // kUnknown: not recorded
  std::string_view why_not;
};

namespace entry_point_reasons {
inline constexpr std::string_view kArray =
    "a CUDA array (textures, surfaces; an opaque layout): not recorded yet; its memory is in the device layer";
inline constexpr std::string_view kHostRegister =
    "pins host memory the program already has: nothing is allocated, on the device or the host";
inline constexpr std::string_view kExport =
    "hands out a handle to memory recorded where it was made; the process that opens it records its import";
inline constexpr std::string_view kPool =
    "a pool holds no memory of its own until allocated from; what it keeps is sampled as device.pool_held";
inline constexpr std::string_view kPoolImport =
    "imports a pool, not memory: the allocations taken from it are recorded (cuMemPoolImportPointer)";
inline constexpr std::string_view kGraph =
    "a graph holds no memory until launched, and destroying one frees none: its memory nodes are recorded, "
    "and what graphs hold on the device is sampled as device.graph_reserved";
inline constexpr std::string_view kGraphTrim = "gives graphs' unused memory back: sampled as device.graph_reserved";
inline constexpr std::string_view kInstantiate =
    "makes no memory node: a graph's memory is obtained at its launch and sampled as device.graph_reserved";
inline constexpr std::string_view kNodeParams =
    "CUDA does not change memory nodes' parameters (cuda.h 13.0: not supported for MEM_ALLOC and MEM_FREE)";
inline constexpr std::string_view kDestroyNode =
    "CUDA refuses it in a graph with memory nodes (cuda.h 13.0, cuGraphDestroyNode)";
inline constexpr std::string_view kChildGraph =
    "a child graph added by cuGraphAddChildGraphNode holds no memory nodes (cuda.h 13.0)";
inline constexpr std::string_view kNoMemory = "a handle or an object of the graph's, not memory";
inline constexpr std::string_view kExternal =
    "memory of another API (Vulkan, Direct3D, NvSciBuf) mapped into CUDA: not recorded yet";
inline constexpr std::string_view kGraphics =
    "a graphics API's (OpenGL, Direct3D, EGL) buffer mapped into CUDA: its memory is the graphics API's";
inline constexpr std::string_view kMulticastBind =
    "binds memory recorded where it was made (cuMemCreate) to a recorded multicast object";
inline constexpr std::string_view kRetain =
    "a new reference to a recorded physical handle: not recorded yet (its extra cuMemRelease is then a free "
    "of a handle already released)";
inline constexpr std::string_view kSparse = "maps sparse CUDA arrays' tiles: arrays are not recorded yet";
}  // namespace entry_point_reasons

inline constexpr MemoryEntryPoint kMemoryEntryPoints[] = {
    // The runtime's.
    {"cudaMalloc", Api::kCudaMalloc, {}},
    {"cudaFree", Api::kCudaFree, {}},
    {"cudaMallocAsync", Api::kCudaMallocAsync, {}},
    {"cudaFreeAsync", Api::kCudaFreeAsync, {}},
    {"cudaMallocFromPoolAsync", Api::kCudaMallocFromPoolAsync, {}},
    {"cudaMallocManaged", Api::kCudaMallocManaged, {}},
    {"cudaMallocHost", Api::kCudaMallocHost, {}},
    {"cudaHostAlloc", Api::kCudaHostAlloc, {}},
    {"cudaFreeHost", Api::kCudaFreeHost, {}},
    {"cudaMallocPitch", Api::kCudaMallocPitch, {}},
    {"cudaMalloc3D", Api::kCudaMalloc3D, {}},
    {"cudaGraphAddMemAllocNode", Api::kCudaGraphAddMemAllocNode, {}},
    {"cudaGraphAddMemFreeNode", Api::kCudaGraphAddMemFreeNode, {}},
    {"cudaGraphAddNode", Api::kCudaGraphAddNodeMemAlloc, {}},  // and ...MemFree; CUDA 12's ABI and _v2 too
    {"cudaIpcOpenMemHandle", Api::kCudaIpcOpenMemHandle, {}},
    {"cudaIpcCloseMemHandle", Api::kCudaIpcCloseMemHandle, {}},
    {"cudaMemPoolImportPointer", Api::kCudaMemPoolImportPointer, {}},
    {"cudaMallocArray", Api::kUnknown, entry_point_reasons::kArray},
    {"cudaMalloc3DArray", Api::kUnknown, entry_point_reasons::kArray},
    {"cudaMallocMipmappedArray", Api::kUnknown, entry_point_reasons::kArray},
    {"cudaFreeArray", Api::kUnknown, entry_point_reasons::kArray},
    {"cudaFreeMipmappedArray", Api::kUnknown, entry_point_reasons::kArray},
    {"cudaHostRegister", Api::kUnknown, entry_point_reasons::kHostRegister},
    {"cudaHostUnregister", Api::kUnknown, entry_point_reasons::kHostRegister},
    {"cudaMemPoolExportPointer", Api::kUnknown, entry_point_reasons::kExport},
    {"cudaMemPoolExportToShareableHandle", Api::kUnknown, entry_point_reasons::kExport},
    {"cudaMemPoolImportFromShareableHandle", Api::kUnknown, entry_point_reasons::kPoolImport},
    {"cudaMemPoolCreate", Api::kUnknown, entry_point_reasons::kPool},
    {"cudaMemPoolDestroy", Api::kUnknown, entry_point_reasons::kPool},
    {"cudaMemPoolTrimTo", Api::kUnknown, entry_point_reasons::kPool},
    {"cudaGraphCreate", Api::kUnknown, entry_point_reasons::kGraph},
    {"cudaGraphDestroy", Api::kUnknown, entry_point_reasons::kGraph},
    {"cudaGraphExecDestroy", Api::kUnknown, entry_point_reasons::kGraph},
    {"cudaDeviceGraphMemTrim", Api::kUnknown, entry_point_reasons::kGraphTrim},
    {"cudaGraphInstantiate", Api::kUnknown, entry_point_reasons::kInstantiate},
    {"cudaGraphInstantiateWithFlags", Api::kUnknown, entry_point_reasons::kInstantiate},
    {"cudaGraphInstantiateWithParams", Api::kUnknown, entry_point_reasons::kInstantiate},
    {"cudaGraphNodeSetParams", Api::kUnknown, entry_point_reasons::kNodeParams},
    {"cudaGraphExecNodeSetParams", Api::kUnknown, entry_point_reasons::kNodeParams},
    {"cudaGraphExecChildGraphNodeSetParams", Api::kUnknown, entry_point_reasons::kChildGraph},
    {"cudaGraphDestroyNode", Api::kUnknown, entry_point_reasons::kDestroyNode},
    {"cudaGraphConditionalHandleCreate", Api::kUnknown, entry_point_reasons::kNoMemory},
    {"cudaGraphRetainUserObject", Api::kUnknown, entry_point_reasons::kNoMemory},
    {"cudaGraphReleaseUserObject", Api::kUnknown, entry_point_reasons::kNoMemory},
    {"cudaImportExternalMemory", Api::kUnknown, entry_point_reasons::kExternal},
    {"cudaExternalMemoryGetMappedBuffer", Api::kUnknown, entry_point_reasons::kExternal},
    {"cudaExternalMemoryGetMappedMipmappedArray", Api::kUnknown, entry_point_reasons::kExternal},
    {"cudaDestroyExternalMemory", Api::kUnknown, entry_point_reasons::kExternal},
    {"cudaGraphicsMapResources", Api::kUnknown, entry_point_reasons::kGraphics},
    {"cudaGraphicsUnmapResources", Api::kUnknown, entry_point_reasons::kGraphics},
    {"cudaGraphicsResourceGetMappedPointer", Api::kUnknown, entry_point_reasons::kGraphics},
    {"cudaGraphicsResourceGetMappedMipmappedArray", Api::kUnknown, entry_point_reasons::kGraphics},
    {"cudaGraphicsSubResourceGetMappedArray", Api::kUnknown, entry_point_reasons::kGraphics},
    {"cudaGraphicsResourceSetMapFlags", Api::kUnknown, entry_point_reasons::kGraphics},
    {"cudaGraphicsUnregisterResource", Api::kUnknown, entry_point_reasons::kGraphics},
    {"cudaIpcGetMemHandle", Api::kUnknown, entry_point_reasons::kExport},
    // The driver's.
    {"cuMemAlloc", Api::kCuMemAlloc, {}},
    {"cuMemFree", Api::kCuMemFree, {}},
    {"cuMemAllocAsync", Api::kCuMemAllocAsync, {}},
    {"cuMemFreeAsync", Api::kCuMemFreeAsync, {}},
    {"cuMemAllocFromPoolAsync", Api::kCuMemAllocFromPoolAsync, {}},
    {"cuMemAllocManaged", Api::kCuMemAllocManaged, {}},
    {"cuMemHostAlloc", Api::kCuMemHostAlloc, {}},
    {"cuMemAllocHost", Api::kCuMemAllocHost, {}},
    {"cuMemFreeHost", Api::kCuMemFreeHost, {}},
    {"cuMemAllocPitch", Api::kCuMemAllocPitch, {}},
    {"cuMemCreate", Api::kCuMemCreate, {}},
    {"cuMemRelease", Api::kCuMemRelease, {}},
    {"cuMemMap", Api::kCuMemMap, {}},
    {"cuMemUnmap", Api::kCuMemUnmap, {}},
    {"cuMemAddressReserve", Api::kCuMemAddressReserve, {}},
    {"cuMemAddressFree", Api::kCuMemAddressFree, {}},
    {"cuGraphAddMemAllocNode", Api::kCuGraphAddMemAllocNode, {}},
    {"cuGraphAddMemFreeNode", Api::kCuGraphAddMemFreeNode, {}},
    {"cuGraphAddNode", Api::kCuGraphAddNodeMemAlloc, {}},  // both ABIs, and kCuGraphAddNodeMemFree
    {"cuIpcOpenMemHandle", Api::kCuIpcOpenMemHandle, {}},
    {"cuIpcCloseMemHandle", Api::kCuIpcCloseMemHandle, {}},
    {"cuMemPoolImportPointer", Api::kCuMemPoolImportPointer, {}},
    {"cuMemImportFromShareableHandle", Api::kCuMemImportFromShareableHandle, {}},
    {"cuMulticastCreate", Api::kCuMulticastCreate, {}},
    {"cuArrayCreate", Api::kUnknown, entry_point_reasons::kArray},
    {"cuArray3DCreate", Api::kUnknown, entry_point_reasons::kArray},
    {"cuArrayDestroy", Api::kUnknown, entry_point_reasons::kArray},
    {"cuMipmappedArrayCreate", Api::kUnknown, entry_point_reasons::kArray},
    {"cuMipmappedArrayDestroy", Api::kUnknown, entry_point_reasons::kArray},
    {"cuMemMapArrayAsync", Api::kUnknown, entry_point_reasons::kSparse},
    {"cuMemHostRegister", Api::kUnknown, entry_point_reasons::kHostRegister},
    {"cuMemHostUnregister", Api::kUnknown, entry_point_reasons::kHostRegister},
    {"cuIpcGetMemHandle", Api::kUnknown, entry_point_reasons::kExport},
    {"cuMemPoolExportPointer", Api::kUnknown, entry_point_reasons::kExport},
    {"cuMemPoolExportToShareableHandle", Api::kUnknown, entry_point_reasons::kExport},
    {"cuMemExportToShareableHandle", Api::kUnknown, entry_point_reasons::kExport},
    {"cuMemGetHandleForAddressRange", Api::kUnknown, entry_point_reasons::kExport},
    {"cuMemPoolImportFromShareableHandle", Api::kUnknown, entry_point_reasons::kPoolImport},
    {"cuMemPoolCreate", Api::kUnknown, entry_point_reasons::kPool},
    {"cuMemPoolDestroy", Api::kUnknown, entry_point_reasons::kPool},
    {"cuMemPoolTrimTo", Api::kUnknown, entry_point_reasons::kPool},
    {"cuMemRetainAllocationHandle", Api::kUnknown, entry_point_reasons::kRetain},
    {"cuMulticastBindMem", Api::kUnknown, entry_point_reasons::kMulticastBind},
    {"cuMulticastBindAddr", Api::kUnknown, entry_point_reasons::kMulticastBind},
    {"cuMulticastUnbind", Api::kUnknown, entry_point_reasons::kMulticastBind},
    {"cuGraphCreate", Api::kUnknown, entry_point_reasons::kGraph},
    {"cuGraphDestroy", Api::kUnknown, entry_point_reasons::kGraph},
    {"cuGraphExecDestroy", Api::kUnknown, entry_point_reasons::kGraph},
    {"cuDeviceGraphMemTrim", Api::kUnknown, entry_point_reasons::kGraphTrim},
    {"cuGraphInstantiate", Api::kUnknown, entry_point_reasons::kInstantiate},
    {"cuGraphInstantiateWithParams", Api::kUnknown, entry_point_reasons::kInstantiate},
    {"cuGraphNodeSetParams", Api::kUnknown, entry_point_reasons::kNodeParams},
    {"cuGraphExecNodeSetParams", Api::kUnknown, entry_point_reasons::kNodeParams},
    {"cuGraphExecChildGraphNodeSetParams", Api::kUnknown, entry_point_reasons::kChildGraph},
    {"cuGraphDestroyNode", Api::kUnknown, entry_point_reasons::kDestroyNode},
    {"cuGraphConditionalHandleCreate", Api::kUnknown, entry_point_reasons::kNoMemory},
    {"cuGraphRetainUserObject", Api::kUnknown, entry_point_reasons::kNoMemory},
    {"cuGraphReleaseUserObject", Api::kUnknown, entry_point_reasons::kNoMemory},
    {"cuImportExternalMemory", Api::kUnknown, entry_point_reasons::kExternal},
    {"cuExternalMemoryGetMappedBuffer", Api::kUnknown, entry_point_reasons::kExternal},
    {"cuExternalMemoryGetMappedMipmappedArray", Api::kUnknown, entry_point_reasons::kExternal},
    {"cuDestroyExternalMemory", Api::kUnknown, entry_point_reasons::kExternal},
    {"cuGraphicsMapResources", Api::kUnknown, entry_point_reasons::kGraphics},
    {"cuGraphicsUnmapResources", Api::kUnknown, entry_point_reasons::kGraphics},
    {"cuGraphicsResourceGetMappedPointer", Api::kUnknown, entry_point_reasons::kGraphics},
    {"cuGraphicsResourceGetMappedMipmappedArray", Api::kUnknown, entry_point_reasons::kGraphics},
    {"cuGraphicsSubResourceGetMappedArray", Api::kUnknown, entry_point_reasons::kGraphics},
    {"cuGraphicsResourceSetMapFlags", Api::kUnknown, entry_point_reasons::kGraphics},
    {"cuGraphicsUnregisterResource", Api::kUnknown, entry_point_reasons::kGraphics},
};

// Every entry point is decided once, and each one not recorded says why.
constexpr bool every_entry_point_decided_once() {
  for (size_t i = 0; i < std::size(kMemoryEntryPoints); ++i) {
    const MemoryEntryPoint& e = kMemoryEntryPoints[i];
    if ((e.recorded_as == Api::kUnknown) == e.why_not.empty()) return false;
    for (size_t j = i + 1; j < std::size(kMemoryEntryPoints); ++j)
      if (kMemoryEntryPoints[j].name == e.name) return false;
  }
  return true;
}
static_assert(every_entry_point_decided_once());

}  // namespace memtrace::inject
