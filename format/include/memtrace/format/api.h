// The CUDA allocation APIs memtrace records, what each one does, and the kinds of memory.
// Header-only and free of dependencies: the injector, the collector and the analysis share it.
// The numeric values are stored in traces: append new values, never renumber.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace memtrace {

enum class Api : uint16_t {
  kUnknown = 0,
  kCudaMalloc = 1,
  kCudaFree = 2,
  kCudaMallocAsync = 3,
  kCudaFreeAsync = 4,
  kCudaMallocFromPoolAsync = 5,
  kCudaMallocManaged = 6,
  kCudaMallocHost = 7,
  kCudaHostAlloc = 8,
  kCudaFreeHost = 9,
  kCudaMallocPitch = 10,
  kCudaMalloc3D = 11,
  kCuMemAlloc = 12,
  kCuMemFree = 13,
  kCuMemAllocAsync = 14,
  kCuMemFreeAsync = 15,
  kCuMemAllocFromPoolAsync = 16,
  kCuMemAllocManaged = 17,
  kCuMemHostAlloc = 18,
  kCuMemAllocHost = 19,
  kCuMemFreeHost = 20,
  kCuMemAllocPitch = 21,
  kCuMemCreate = 22,
  kCuMemRelease = 23,
  kCuMemMap = 24,
  kCuMemUnmap = 25,
  kCuMemAddressReserve = 26,
  kCuMemAddressFree = 27,
  // NVTX, recorded as an injection library: phases and steps (no memory; name: the message), ...
  kNvtxMark = 28,
  kNvtxRangePush = 29,
  kNvtxRangePop = 30,
  kNvtxRangeStart = 31,  // addr: the range's id
  kNvtxRangeEnd = 32,
  // ... and the memory API (nvToolsExtMem.h), where allocators describe their sub-allocations:
  // heaps (a pool's range, addr+size) and the regions handed out of them (the allocated layer,
  // heap: the heap's base address).
  kNvtxMemHeapRegister = 33,
  kNvtxMemHeapUnregister = 34,
  kNvtxMemHeapReset = 35,  // every region of the heap is gone; the heap stays
  kNvtxMemRegionRegister = 36,
  kNvtxMemRegionUnregister = 37,
  // PyTorch's caching allocator, as it reports itself (its trace tracker, or a snapshot's trace):
  // the allocated layer, in the bytes tensors asked for (PyTorch's requested_bytes). Blocks
  // handed to tensors (alloc; free: the tensor let go of it, a mark; free_completed: the block is
  // back in the cache, once the streams that used it are done: where requested_bytes counts it
  // down, and the allocation ends), the segments it carves them from (heaps: alloc/free, and
  // map/unmap for expandable segments; a segment's handle: the private pool it was made for,
  // torch_pool.h's key, 0 for the default pool or where PyTorch does not say), and the
  // out-of-memory it raised (an alloc that failed: size requested, device_free).
  kTorchAlloc = 38,
  kTorchFree = 39,
  kTorchFreeCompleted = 40,
  kTorchSegmentAlloc = 41,
  kTorchSegmentFree = 42,
  kTorchSegmentMap = 43,
  kTorchSegmentUnmap = 44,
  kTorchOom = 45,
  // What a tensor at addr is (name: parameter, gradient, optimizer_state, input, ...), as the
  // Python shim saw it.
  kTorchCategory = 46,
  // Marks and ranges of memtrace's Python shim (steps from the optimizer, forward and backward),
  // read as NVTX's are.
  kShimMark = 47,
  kShimRangePush = 48,
  kShimRangePop = 49,
  // The reserved layer of an imported PyTorch snapshot: its segments (what cudaMalloc or cuMemMap
  // gave the allocator).
  kSnapshotSegment = 50,
  kSnapshotSegmentFree = 51,
  // What CUPTI's activity records say the device did (memtrace run --verify): an allocation or a
  // release of the memory at addr (size bytes, of kind), whichever call made it. Observations, not
  // calls: they change nothing in the live set and are compared with the calls recorded.
  kCuptiMemoryAlloc = 52,
  kCuptiMemoryFree = 53,
  // The device layer: the device's memory in use (cudaMemGetInfo: total minus free; size), with
  // device_free and device_total, sampled after allocations (a millisecond apart at most per
  // device, but after every large one). An observation: what lies outside the reserved layer is
  // this minus what the reserved layer holds then.
  kDeviceUsed = 54,
  // Sampled with it when they change: what the device's current stream-ordered pool holds beyond
  // the allocations made from it (cuMemPoolGetAttribute: reserved minus used; size), and what
  // CUDA graphs hold for their memory nodes (cuDeviceGetGraphMemAttribute, reserved; size).
  kDevicePoolHeld = 55,
  kDeviceGraphReserved = 56,
  // CUDA graphs' memory nodes: an allocation node names the address its allocation will have at
  // each launch (handle: the graph); the memory is the graph's, held from launch to its free (a
  // free node, or a free call after the launch), and counted by device.graph_reserved, not here.
  kCudaGraphAddMemAllocNode = 57,
  kCudaGraphAddMemFreeNode = 58,
  kCuGraphAddMemAllocNode = 59,
  kCuGraphAddMemFreeNode = 60,
  // Memory of another process, opened here: its device memory is the exporter's, not this
  // process's. IPC handles to an allocation (opened and closed), a pool allocation imported from
  // another process's pool (handle: the pool; freed by cudaFree/cudaFreeAsync), and physical
  // memory imported by a shareable handle (addr: the handle; released by cuMemRelease; the driver
  // does not say its size, its mappings do).
  kCudaIpcOpenMemHandle = 61,
  kCudaIpcCloseMemHandle = 62,
  kCuIpcOpenMemHandle = 63,
  kCuIpcCloseMemHandle = 64,
  kCudaMemPoolImportPointer = 65,
  kCuMemPoolImportPointer = 66,
  kCuMemImportFromShareableHandle = 67,
  // A multicast object (addr: its handle; size: the object's; released by cuMemRelease): the
  // devices' memory bound to it is counted where it was created.
  kCuMulticastCreate = 68,
  // Sampled with device.used when it changes: what other processes hold on the device (size): the
  // device's use minus this process's, as NVML reports it per process.
  kDeviceOtherProcesses = 69,
  // PyTorch's own counters (torch.cuda.memory_stats), read by the Python shim at exit and at each
  // out-of-memory: name "<when>:<figure>" (when: exit or oom; figure as memory_stats names it,
  // "requested_bytes.all.peak"), size the value; name "reset_peak" where the program reset its
  // peaks (torch.cuda.reset_peak_memory_stats). An observation: it changes no figure.
  kTorchCounter = 70,
  // CUDA graphs' memory nodes made through the generic node API (CUDA 12.2: a node of any type,
  // cudaGraphNodeParams.type saying which): an allocation node or a free node, each as its own
  // call made it (handle: the graph, as kCudaGraphAddMemAllocNode's). Nodes of other types hold
  // no memory and are not recorded.
  kCudaGraphAddNodeMemAlloc = 71,
  kCudaGraphAddNodeMemFree = 72,
  kCuGraphAddNodeMemAlloc = 73,
  kCuGraphAddNodeMemFree = 74,
  // Sampled with device.other_processes: what NVML reports this process uses on the device
  // (nvmlDeviceGetComputeRunningProcesses' usedGpuMemory; size), as nvidia-smi shows it.
  kDeviceProcessUsed = 75,
  // A setting of PyTorch's allocator, as the process had it when PyTorch initialized CUDA: name
  // "torch=<version>" (torch.__version__; an imported snapshot: the first release of its format),
  // "PYTORCH_CUDA_ALLOC_CONF=<text>" (the environment's; an imported snapshot: its
  // allocator_settings in that syntax), "PYTORCH_ALLOC_CONF=<text>". An observation.
  kTorchSetting = 76,
  kCount = 77,
};

// What a recorded object is. Each kind has its own address space in the live set: a VMM mapping
// and the VA reservation it lies in share addresses, a physical handle is not an address at all.
enum class MemKind : uint8_t {
  kUnknown = 0,
  kDevice = 1,         // cudaMalloc, cuMemAlloc, pitch/3D, stream-ordered allocations
  kManaged = 2,        // cudaMallocManaged, cuMemAllocManaged
  kPinnedHost = 3,     // cudaMallocHost, cudaHostAlloc, cuMemHostAlloc, cuMemAllocHost
  kVmmPhysical = 4,    // cuMemCreate: physical memory behind a handle (addr is the handle)
  kVmmMapping = 5,     // cuMemMap: a handle mapped into a VA range (aux is the handle)
  kVaReservation = 6,  // cuMemAddressReserve: address space only, no memory
  kHeap = 7,           // an allocator's pool (NVTX heap): the range its regions lie in, no memory of its own
  kGraphMemory = 8,    // a CUDA graph's allocation (a memory node, or an allocation captured into one)
  kIpcImport = 9,      // another process's allocation, opened here (IPC handle, pool pointer import)
  kVmmImported = 10,   // another process's physical memory, imported by a shareable handle (addr is the handle)
  kMulticast = 11,     // a multicast object (addr is the handle)
  kCount = 12,
};

// Which depth of a process's GPU memory an event describes: the device (what nvidia-smi shows),
// the reserved layer (what the allocation APIs hold), or the allocated layer (what an allocator
// hands out of what it reserved).
enum class Layer : uint8_t { kUnknown = 0, kDevice = 1, kReserved = 2, kAllocated = 3 };

// kMark: a mark, a range edge, a category; it changes no memory. A name, when it has one, is the
// string id in aux.
enum class Op : uint8_t { kAlloc = 0, kFree = 1, kMark = 2 };

// What else is known of one event (a bit set, stored in traces).
enum EventFlags : uint32_t {
  // A stream-ordered call made while its stream was being captured into a CUDA graph: it added a
  // node to the graph, and the memory is the graph's (obtained at each launch), not the stream's.
  kEventCaptured = 1,
  // Recorded from CUPTI's callback for the call, not by an interposer (memtrace run --backend).
  kEventFromCupti = 2,
  // An allocation the process held before memtrace started recording it (memtrace attach), known
  // from its allocator's own state: its time is the start's, and its stack unknown.
  kEventBeforeRecording = 4,
};

// The result of an allocation that failed for lack of memory: cudaErrorMemoryAllocation and
// CUDA_ERROR_OUT_OF_MEMORY are both 2.
inline constexpr int32_t kOutOfMemoryResult = 2;

// Which of Event's fields an API's events fill beside the common ones: a trace stores them in one
// column (EventBatch.aux), read back into the field the API names.
enum class AuxField : uint8_t { kNone, kHandle, kHeap, kName };

struct ApiInfo {
  Api api;  // the row's own value: rows are found by it, never by their position alone
  std::string_view name;
  Op op;
  MemKind kind;
  Layer layer = Layer::kReserved;
  AuxField aux = AuxField::kNone;
};

inline constexpr ApiInfo kApiTable[] = {
    {Api::kUnknown, "unknown", Op::kAlloc, MemKind::kUnknown},
    {Api::kCudaMalloc, "cudaMalloc", Op::kAlloc, MemKind::kDevice},
    {Api::kCudaFree, "cudaFree", Op::kFree, MemKind::kDevice},
    {Api::kCudaMallocAsync, "cudaMallocAsync", Op::kAlloc, MemKind::kDevice},
    {Api::kCudaFreeAsync, "cudaFreeAsync", Op::kFree, MemKind::kDevice},
    {Api::kCudaMallocFromPoolAsync, "cudaMallocFromPoolAsync", Op::kAlloc, MemKind::kDevice, Layer::kReserved,
     AuxField::kHandle},
    {Api::kCudaMallocManaged, "cudaMallocManaged", Op::kAlloc, MemKind::kManaged},
    {Api::kCudaMallocHost, "cudaMallocHost", Op::kAlloc, MemKind::kPinnedHost},
    {Api::kCudaHostAlloc, "cudaHostAlloc", Op::kAlloc, MemKind::kPinnedHost},
    {Api::kCudaFreeHost, "cudaFreeHost", Op::kFree, MemKind::kPinnedHost},
    {Api::kCudaMallocPitch, "cudaMallocPitch", Op::kAlloc, MemKind::kDevice},
    {Api::kCudaMalloc3D, "cudaMalloc3D", Op::kAlloc, MemKind::kDevice},
    {Api::kCuMemAlloc, "cuMemAlloc", Op::kAlloc, MemKind::kDevice},
    {Api::kCuMemFree, "cuMemFree", Op::kFree, MemKind::kDevice},
    {Api::kCuMemAllocAsync, "cuMemAllocAsync", Op::kAlloc, MemKind::kDevice},
    {Api::kCuMemFreeAsync, "cuMemFreeAsync", Op::kFree, MemKind::kDevice},
    {Api::kCuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", Op::kAlloc, MemKind::kDevice, Layer::kReserved,
     AuxField::kHandle},
    {Api::kCuMemAllocManaged, "cuMemAllocManaged", Op::kAlloc, MemKind::kManaged},
    {Api::kCuMemHostAlloc, "cuMemHostAlloc", Op::kAlloc, MemKind::kPinnedHost},
    {Api::kCuMemAllocHost, "cuMemAllocHost", Op::kAlloc, MemKind::kPinnedHost},
    {Api::kCuMemFreeHost, "cuMemFreeHost", Op::kFree, MemKind::kPinnedHost},
    {Api::kCuMemAllocPitch, "cuMemAllocPitch", Op::kAlloc, MemKind::kDevice},
    {Api::kCuMemCreate, "cuMemCreate", Op::kAlloc, MemKind::kVmmPhysical},
    {Api::kCuMemRelease, "cuMemRelease", Op::kFree, MemKind::kVmmPhysical},
    {Api::kCuMemMap, "cuMemMap", Op::kAlloc, MemKind::kVmmMapping, Layer::kReserved, AuxField::kHandle},
    {Api::kCuMemUnmap, "cuMemUnmap", Op::kFree, MemKind::kVmmMapping},
    {Api::kCuMemAddressReserve, "cuMemAddressReserve", Op::kAlloc, MemKind::kVaReservation},
    {Api::kCuMemAddressFree, "cuMemAddressFree", Op::kFree, MemKind::kVaReservation},
    {Api::kNvtxMark, "nvtxMark", Op::kMark, MemKind::kUnknown, Layer::kUnknown, AuxField::kName},
    {Api::kNvtxRangePush, "nvtxRangePush", Op::kMark, MemKind::kUnknown, Layer::kUnknown, AuxField::kName},
    {Api::kNvtxRangePop, "nvtxRangePop", Op::kMark, MemKind::kUnknown, Layer::kUnknown, AuxField::kName},
    {Api::kNvtxRangeStart, "nvtxRangeStart", Op::kMark, MemKind::kUnknown, Layer::kUnknown, AuxField::kName},
    {Api::kNvtxRangeEnd, "nvtxRangeEnd", Op::kMark, MemKind::kUnknown, Layer::kUnknown, AuxField::kName},
    {Api::kNvtxMemHeapRegister, "nvtxMemHeapRegister", Op::kAlloc, MemKind::kHeap, Layer::kAllocated},
    {Api::kNvtxMemHeapUnregister, "nvtxMemHeapUnregister", Op::kFree, MemKind::kHeap, Layer::kAllocated},
    {Api::kNvtxMemHeapReset, "nvtxMemHeapReset", Op::kFree, MemKind::kHeap, Layer::kAllocated},
    {Api::kNvtxMemRegionRegister, "nvtxMemRegionsRegister", Op::kAlloc, MemKind::kDevice, Layer::kAllocated,
     AuxField::kHeap},
    {Api::kNvtxMemRegionUnregister, "nvtxMemRegionsUnregister", Op::kFree, MemKind::kDevice, Layer::kAllocated},
    {Api::kTorchAlloc, "torch.alloc", Op::kAlloc, MemKind::kDevice, Layer::kAllocated},
    {Api::kTorchFree, "torch.free", Op::kMark, MemKind::kDevice, Layer::kAllocated},
    {Api::kTorchFreeCompleted, "torch.free_completed", Op::kFree, MemKind::kDevice, Layer::kAllocated},
    {Api::kTorchSegmentAlloc, "torch.segment_alloc", Op::kAlloc, MemKind::kHeap, Layer::kAllocated, AuxField::kHandle},
    {Api::kTorchSegmentFree, "torch.segment_free", Op::kFree, MemKind::kHeap, Layer::kAllocated},
    {Api::kTorchSegmentMap, "torch.segment_map", Op::kAlloc, MemKind::kHeap, Layer::kAllocated, AuxField::kHandle},
    {Api::kTorchSegmentUnmap, "torch.segment_unmap", Op::kFree, MemKind::kHeap, Layer::kAllocated},
    {Api::kTorchOom, "torch.oom", Op::kAlloc, MemKind::kDevice, Layer::kAllocated},
    {Api::kTorchCategory, "torch.category", Op::kMark, MemKind::kUnknown, Layer::kAllocated, AuxField::kName},
    {Api::kShimMark, "memtrace.mark", Op::kMark, MemKind::kUnknown, Layer::kUnknown, AuxField::kName},
    {Api::kShimRangePush, "memtrace.range_push", Op::kMark, MemKind::kUnknown, Layer::kUnknown, AuxField::kName},
    {Api::kShimRangePop, "memtrace.range_pop", Op::kMark, MemKind::kUnknown, Layer::kUnknown, AuxField::kName},
    {Api::kSnapshotSegment, "snapshot.segment", Op::kAlloc, MemKind::kDevice},
    {Api::kSnapshotSegmentFree, "snapshot.segment_free", Op::kFree, MemKind::kDevice},
    {Api::kCuptiMemoryAlloc, "cupti.memory_alloc", Op::kMark, MemKind::kDevice, Layer::kUnknown},
    {Api::kCuptiMemoryFree, "cupti.memory_free", Op::kMark, MemKind::kDevice, Layer::kUnknown},
    {Api::kDeviceUsed, "device.used", Op::kMark, MemKind::kDevice, Layer::kDevice},
    {Api::kDevicePoolHeld, "device.pool_held", Op::kMark, MemKind::kDevice, Layer::kDevice},
    {Api::kDeviceGraphReserved, "device.graph_reserved", Op::kMark, MemKind::kDevice, Layer::kDevice},
    {Api::kCudaGraphAddMemAllocNode, "cudaGraphAddMemAllocNode", Op::kAlloc, MemKind::kGraphMemory, Layer::kReserved,
     AuxField::kHandle},
    {Api::kCudaGraphAddMemFreeNode, "cudaGraphAddMemFreeNode", Op::kFree, MemKind::kGraphMemory},
    {Api::kCuGraphAddMemAllocNode, "cuGraphAddMemAllocNode", Op::kAlloc, MemKind::kGraphMemory, Layer::kReserved,
     AuxField::kHandle},
    {Api::kCuGraphAddMemFreeNode, "cuGraphAddMemFreeNode", Op::kFree, MemKind::kGraphMemory},
    {Api::kCudaIpcOpenMemHandle, "cudaIpcOpenMemHandle", Op::kAlloc, MemKind::kIpcImport},
    {Api::kCudaIpcCloseMemHandle, "cudaIpcCloseMemHandle", Op::kFree, MemKind::kIpcImport},
    {Api::kCuIpcOpenMemHandle, "cuIpcOpenMemHandle", Op::kAlloc, MemKind::kIpcImport},
    {Api::kCuIpcCloseMemHandle, "cuIpcCloseMemHandle", Op::kFree, MemKind::kIpcImport},
    {Api::kCudaMemPoolImportPointer, "cudaMemPoolImportPointer", Op::kAlloc, MemKind::kIpcImport, Layer::kReserved,
     AuxField::kHandle},
    {Api::kCuMemPoolImportPointer, "cuMemPoolImportPointer", Op::kAlloc, MemKind::kIpcImport, Layer::kReserved,
     AuxField::kHandle},
    {Api::kCuMemImportFromShareableHandle, "cuMemImportFromShareableHandle", Op::kAlloc, MemKind::kVmmImported},
    {Api::kCuMulticastCreate, "cuMulticastCreate", Op::kAlloc, MemKind::kMulticast},
    {Api::kDeviceOtherProcesses, "device.other_processes", Op::kMark, MemKind::kDevice, Layer::kDevice},
    {Api::kTorchCounter, "torch.counter", Op::kMark, MemKind::kUnknown, Layer::kUnknown, AuxField::kName},
    {Api::kCudaGraphAddNodeMemAlloc, "cudaGraphAddNode.mem_alloc", Op::kAlloc, MemKind::kGraphMemory, Layer::kReserved,
     AuxField::kHandle},
    {Api::kCudaGraphAddNodeMemFree, "cudaGraphAddNode.mem_free", Op::kFree, MemKind::kGraphMemory},
    {Api::kCuGraphAddNodeMemAlloc, "cuGraphAddNode.mem_alloc", Op::kAlloc, MemKind::kGraphMemory, Layer::kReserved,
     AuxField::kHandle},
    {Api::kCuGraphAddNodeMemFree, "cuGraphAddNode.mem_free", Op::kFree, MemKind::kGraphMemory},
    {Api::kDeviceProcessUsed, "device.process_used", Op::kMark, MemKind::kDevice, Layer::kDevice},
    {Api::kTorchSetting, "torch.setting", Op::kMark, MemKind::kUnknown, Layer::kUnknown, AuxField::kName},
};

// The names of kinds and layers, each row keyed by its value, as kApiTable's.
template <typename Value>
struct ValueName {
  Value value;
  std::string_view name;
};
inline constexpr ValueName<MemKind> kMemKindNames[] = {
    {MemKind::kUnknown, "unknown"},
    {MemKind::kDevice, "device"},
    {MemKind::kManaged, "managed"},
    {MemKind::kPinnedHost, "pinned_host"},
    {MemKind::kVmmPhysical, "vmm_physical"},
    {MemKind::kVmmMapping, "vmm_mapping"},
    {MemKind::kVaReservation, "va_reservation"},
    {MemKind::kHeap, "heap"},
    {MemKind::kGraphMemory, "graph_memory"},
    {MemKind::kIpcImport, "ipc_import"},
    {MemKind::kVmmImported, "vmm_imported"},
    {MemKind::kMulticast, "multicast"},
};
inline constexpr ValueName<Layer> kLayerNames[] = {{Layer::kUnknown, "unknown"},
                                                   {Layer::kDevice, "device"},
                                                   {Layer::kReserved, "reserved"},
                                                   {Layer::kAllocated, "allocated"}};
// Whether TABLE has COUNT rows, each at the index of its own value (what VALUE_OF reads of it).
template <typename Table, typename ValueOf>
constexpr bool in_value_order(const Table& table, size_t count, ValueOf value_of) {
  size_t i = 0;
  for (const auto& row : table)
    if (static_cast<size_t>(value_of(row)) != i++) return false;
  return std::size(table) == count;
}
inline constexpr auto kValueOfRow = [](const auto& row) { return row.value; };
static_assert(in_value_order(kMemKindNames, static_cast<size_t>(MemKind::kCount), kValueOfRow),
              "one row per MemKind, in order");
static_assert(in_value_order(kLayerNames, 4, kValueOfRow), "one row per Layer, in order");

// Every value has its row, at its own index: a row moved or missing does not compile.
static_assert(in_value_order(kApiTable, static_cast<size_t>(Api::kCount), [](const ApiInfo& row) { return row.api; }),
              "kApiTable's rows must be in Api's order, one per value");

inline const ApiInfo& api_info(Api api) {
  auto i = static_cast<size_t>(api);
  return kApiTable[i < std::size(kApiTable) ? i : 0];
}
inline std::string_view api_name(Api api) { return api_info(api).name; }
// The longest API name, for columns that list them.
inline constexpr size_t kLongestApiName = [] {
  size_t longest = 0;
  for (const ApiInfo& info : kApiTable) longest = info.name.size() > longest ? info.name.size() : longest;
  return longest;
}();
// What memtrace observed rather than a call the program made (CUPTI's activity records, samples
// of the device's memory).
inline bool is_observation(Api api) {
  return api == Api::kCuptiMemoryAlloc || api == Api::kCuptiMemoryFree || api == Api::kDeviceUsed ||
         api == Api::kDevicePoolHeld || api == Api::kDeviceGraphReserved || api == Api::kDeviceOtherProcesses ||
         api == Api::kTorchCounter || api == Api::kDeviceProcessUsed || api == Api::kTorchSetting;
}
inline std::string_view mem_kind_name(MemKind kind) {
  auto i = static_cast<size_t>(kind);
  return kMemKindNames[i < std::size(kMemKindNames) ? i : 0].name;
}
inline std::string_view layer_name(Layer layer) {
  auto i = static_cast<size_t>(layer);
  return kLayerNames[i < std::size(kLayerNames) ? i : 0].name;
}
inline std::optional<Api> api_from_name(std::string_view name) {
  for (size_t i = 1; i < std::size(kApiTable); ++i)
    if (kApiTable[i].name == name) return static_cast<Api>(i);
  return std::nullopt;
}

// What PyTorch's caching allocator reports of itself (torch.alloc ... torch.category).
inline constexpr bool from_pytorch(Api api) { return api >= Api::kTorchAlloc && api <= Api::kTorchCategory; }

// Memory that occupies the GPU: what the reserved layer's byte counts add up. Pinned host memory
// lives in host RAM; mappings and reservations only name addresses of memory counted elsewhere.
// Graph memory, imports and multicast objects are not: a graph's memory is the device layer's
// device.graph_reserved, an import's is its exporter's.
inline constexpr bool counts_as_device_memory(MemKind kind) {
  return kind == MemKind::kDevice || kind == MemKind::kManaged || kind == MemKind::kVmmPhysical;
}

}  // namespace memtrace
