// The driver's private tables (cuGetExportTable), as the simulated runtime asks for them.
//
// NVIDIA's runtime 13.0 asks NVIDIA's driver for seven tables at initialization and reaches the
// driver through them for what the public API does not offer; without them every call of it fails
// (../shared/observed/cudart-13.0-driver-lookups.md). Their contents are NVIDIA's own: the
// simulated driver has none of them, and our runtime asks for them only to make the same requests
// in the same order. What our runtime does need of the simulated driver privately (the ledger the
// tests compare traces with, the API callbacks CUPTI reports, the sizes of allocations it frees)
// it gets from one table of the simulated device's own, the same way.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>

namespace sim {

// The seven tables NVIDIA's libcudart.so.13 (13.0) asks for, in the order it asks (observed), each
// UUID as it lies in that library (/usr/local/cuda/lib64/libcudart.so.13).
inline constexpr CUuuid kNvidiaRuntimeTables[] = {
    {{'\xf8', '\xcf', '\xf9', '\x51', '\x21', '\x46', '\x8b', '\x4e', '\xb9', '\xe2', '\xfb', '\x46', '\x9e', '\x7c',
      '\x0d', '\xd9'}},
    {{'\x6b', '\xd5', '\xfb', '\x6c', '\x5b', '\xf4', '\xe7', '\x4a', '\x89', '\x87', '\xd9', '\x39', '\x12', '\xfd',
      '\x9d', '\xf9'}},
    {{'\xa0', '\x94', '\x79', '\x8c', '\x2e', '\x74', '\x2e', '\x74', '\x93', '\xf2', '\x08', '\x00', '\x20', '\x0c',
      '\x0a', '\x66'}},
    {{'\x42', '\xd8', '\x5a', '\x81', '\x23', '\xf6', '\xcb', '\x47', '\x82', '\x98', '\xf6', '\xe7', '\x8a', '\x3a',
      '\xec', '\xdc'}},
    {{'\xc6', '\x93', '\x33', '\x6e', '\x11', '\x21', '\xdf', '\x11', '\xa8', '\xc3', '\x68', '\xf3', '\x55', '\xd8',
      '\x95', '\x93'}},
    {{'\x26', '\x3e', '\x88', '\x60', '\x7c', '\xd2', '\x61', '\x43', '\x92', '\xf6', '\xbb', '\xd5', '\x00', '\x6d',
      '\xfa', '\x7e'}},
    {{'\xd4', '\x08', '\x20', '\x55', '\xbd', '\xe6', '\x70', '\x4b', '\x8d', '\x34', '\xba', '\x12', '\x3c', '\x66',
      '\xe1', '\xf2'}},
};

// The simulated device's own table: "memtrace-sim-hk1".
inline constexpr CUuuid kSimHooksTable = {
    {'m', 'e', 'm', 't', 'r', 'a', 'c', 'e', '-', 's', 'i', 'm', '-', 'h', 'k', '1'}};

// Its contents. Like NVIDIA's tables it begins with its own size.
struct SimHooks {
  size_t size;
  // The ledger (ledger.h): a public call begins (1 for the outermost on this thread) and ends.
  int (*enter)();
  void (*leave)(int outermost, const char* api, int result, uint64_t bytes, int counted);
  // A public call's entry or exit, for CUPTI's API callbacks (api_callbacks.h).
  void (*api_event)(int domain, int cbid, int site, const char* name, const void* params, const void* result);
  // The size of the allocation at an address, 0 if none: frees count the bytes they release.
  uint64_t (*allocation_size)(uint64_t addr);
};

// The table the stand-in CUPTI asks for, as NVIDIA's CUPTI reaches NVIDIA's driver privately
// (cuGetExportTable, looked up with dlsym): "memtrace-sim-cp1".
inline constexpr CUuuid kSimCuptiTable = {
    {'m', 'e', 'm', 't', 'r', 'a', 'c', 'e', '-', 's', 'i', 'm', '-', 'c', 'p', '1'}};

struct SimCuptiHooks {
  size_t size;
  // Where the driver's API callbacks and memory activity go (api_callbacks.h).
  void (*set_api_callback)(void (*callback)(int domain, int cbid, int site, const char* name, const void* params,
                                            const void* result));
  void (*set_memory_activity)(void (*activity)(int released, int memory_kind, uint64_t address, uint64_t bytes,
                                               int device));
  // Whether cuInit has run.
  int (*initialized)();
};

// This library's way to them: in the driver its own functions; in the runtime the table the
// driver gave it when it initialized (it initializes on the first use, as NVIDIA's runtime sets up
// its hooks on its first call), or one that does nothing where the driver gave none.
__attribute__((visibility("hidden"))) const SimHooks& hooks();

}  // namespace sim
