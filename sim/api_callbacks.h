// What a profiling tool sees of the simulated device through CUPTI, which the stand-in
// libcupti.so.13 (cupti.cpp) subscribes to, as NVIDIA's CUPTI hooks into NVIDIA's driver:
// - API callbacks: each public call of the driver and of the runtime that allocates or frees fires
//   one at entry and one at exit, with CUPTI's own parameter structure for it
//   (generated_cuda_meta.h, generated_cuda_runtime_api_meta.h) and, at exit, its result. The
//   driver calls a runtime call makes fire their own callbacks inside it.
// - memory activity: each allocation and release of device, managed and pinned host memory, as
//   CUPTI's MEMORY2 activity records report them, whichever call made it.
// Test knobs: MEMTRACE_SIM_SILENT_API=NAME[,NAME...] fires no callbacks for those functions (as if
// CUPTI had no callback for them); MEMTRACE_SIM_NO_ACTIVITY_BYTES=N reports no activity for allocations
// of exactly N bytes. Either hides an allocation from one side, for `memtrace run --verify`.
#pragma once

#include <cstdint>

#include "export_tables.h"

extern "C" {
// SITE: 0 at entry, 1 at exit (CUPTI_API_ENTER, CUPTI_API_EXIT). RESULT: at exit, the call's
// CUresult or cudaError_t.
typedef void (*memtrace_sim_api_callback)(int domain, int cbid, int site, const char* name, const void* params,
                                          const void* result);
void memtrace_sim_set_api_callback(memtrace_sim_api_callback callback);
void memtrace_sim_api_event(int domain, int cbid, int site, const char* name, const void* params, const void* result);

// RELEASED: 0 for an allocation, 1 for a release. MEMORY_KIND: CUpti_ActivityMemoryKind.
typedef void (*memtrace_sim_memory_activity)(int released, int memory_kind, uint64_t address, uint64_t bytes,
                                             int device);
void memtrace_sim_set_memory_activity(memtrace_sim_memory_activity activity);
}

namespace sim {

// Reports every memory change of the device model to the activity subscriber (device_model.cpp).
void memory_activity(bool released, int memory_kind, uint64_t address, uint64_t bytes, int device);

// Runs BODY (the call's implementation) between its entry and exit callbacks. In the runtime they
// reach the driver through its table (export_tables.h): the runtime initializes before its first
// callback, as NVIDIA's gets its hooks into the driver at its initialization.
template <typename Params, typename Body>
auto traced(int domain, int cbid, const char* name, Params params, Body&& body) {
  hooks().api_event(domain, cbid, 0, name, &params, nullptr);
  auto result = body();
  hooks().api_event(domain, cbid, 1, name, &params, &result);
  return result;
}

}  // namespace sim
