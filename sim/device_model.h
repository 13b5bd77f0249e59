// The simulated GPUs: device memory over host memory with a fixed capacity per device.
// Everything here runs under one lock; the driver API in driver_api.cpp is a thin layer on top.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sim {

// kImported: another process's device memory opened here (IPC): addresses of its own, in no
// device's use by this process, and sharing no contents with the exporter's.
enum class Memory { kDevice, kManaged, kPinnedHost, kImported };

enum class Status { kOk, kOutOfMemory, kInvalidValue, kInvalidDevice, kNotFound };

inline constexpr size_t kVmmGranularity = 2u << 20;
inline constexpr size_t kPitchAlignment = 512;

int device_count();
// Whether [ADDR, ADDR+BYTES) can be read and written: not memory handed out unbacked
// (MEMTRACE_SIM_UNBACKED=1, for benchmarks).
bool backed(uint64_t addr, uint64_t bytes);
uint64_t device_capacity();   // bytes per device
uint64_t context_overhead();  // bytes every device shows as used
// What this process has in use on DEVICE, as NVML counts a process's: its context, its
// allocations and what its graphs reserved.
uint64_t process_used(int device);
// What other processes hold on every device (MEMTRACE_SIM_OTHER_PROCESSES_BYTES, default 0):
// in use on the device, in none of this process's figures but cudaMemGetInfo's.
uint64_t other_processes_bytes();
bool valid_device(int device);
// Free and total bytes as cudaMemGetInfo reports them.
void memory_info(int device, uint64_t* free_bytes, uint64_t* total_bytes);

Status allocate(Memory memory, int device, uint64_t size, uint64_t* addr);
// Frees an allocation of one of MEMORY's kinds that starts at ADDR; its size in *size.
Status release(uint64_t addr, bool host_memory, uint64_t* size);
void reset_device(int device);

// What CUDA graphs keep reserved on DEVICE for their allocations: in use on the device, in no
// allocation of the program's. Grows to BYTES at a launch (kOutOfMemory if it cannot), given back
// by a trim.
Status reserve_graph_memory(int device, uint64_t bytes);
// The size of the graph allocation at ADDR that no free node has freed yet, 0 if none (graph_memory.cpp).
uint64_t graph_allocation_size(uint64_t addr);
uint64_t graph_memory(int device);
void trim_graph_memory(int device);

// The allocation ADDR lies in: its start, size and kind.
Status address_range(uint64_t addr, uint64_t* base, uint64_t* size, Memory* memory = nullptr);

// Virtual memory management.
Status vmm_create(int device, uint64_t size, uint64_t* handle);
Status vmm_release(uint64_t handle, uint64_t* size);
Status vmm_reserve(uint64_t size, uint64_t alignment, uint64_t* addr);
Status vmm_free_reservation(uint64_t addr, uint64_t size);
Status vmm_map(uint64_t addr, uint64_t size, uint64_t offset, uint64_t handle);
Status vmm_unmap(uint64_t addr, uint64_t size, uint64_t* bytes);
Status vmm_set_access(uint64_t addr, uint64_t size);
// The device a handle's memory is on (-1 for a multicast object).
Status vmm_handle_device(uint64_t handle, int* device);
// Sharing physical memory between processes, as POSIX file descriptors: what export hands out
// (the memory itself, a memfd) is what import takes. Imported memory is the exporter's: mapped
// here, it shares its contents, but it is in no device's use by this process.
Status vmm_export(uint64_t handle, int* fd);
Status vmm_import(int fd, uint64_t* handle);
// A multicast object of SIZE bytes: a handle, released like the others, holding no memory of its own.
Status multicast_create(uint64_t size, uint64_t* handle);

// The device the memory at ADDR (inside an allocation or a mapping) is on; kNotFound for an
// address the device did not hand out, -1 in *device for pinned host memory.
Status pointer_device(uint64_t addr, int* device);

// The physical GPU behind ORDINAL: CUDA_VISIBLE_DEVICES=2,3 makes ordinal 0 physical GPU 2, as
// the driver does; its UUID (16 bytes) is made from the physical index.
int physical_index(int ordinal);
void device_uuid(int ordinal, unsigned char (&uuid)[16]);

// Called by the device model whenever a device's live bytes change (ledger.cpp).
void ledger_device_changed(int device, uint64_t live, uint64_t peak);

}  // namespace sim
