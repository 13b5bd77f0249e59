// What the Python stand-in (python/torch) calls in libc10_cuda, through ctypes.CDLL (the GIL
// released, as PyTorch's ops release it): the allocator in use (native, cudaMallocAsync, or a
// pluggable one that replaced it), its statistics, its history and snapshot, its OOM observers,
// and private pools. These C functions are the stand-in's own plumbing, in place of PyTorch's
// Python bindings (torch/csrc/cuda/Module.cpp); what they do follows those bindings.
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "caching_allocator.h"

using namespace c10::cuda::CUDACachingAllocator;
using Native::NativeCachingAllocator;

namespace {

NativeCachingAllocator& native() { return NativeCachingAllocator::instance(); }
bool is_native() { return allocator.load() == &native(); }
bool is_async() { return allocator.load() == Native::async_allocator(); }

void say(char* error, size_t error_bytes, const std::string& text) {
  if (error && error_bytes) std::snprintf(error, error_bytes, "%s", text.c_str());
}

}  // namespace

extern "C" {

SIM_TORCH_API int sim_torch_init(int device_count) {
  allocator.load()->init(device_count);
  return 0;
}

SIM_TORCH_API const char* sim_torch_backend() {
  static thread_local std::string name;
  name = allocator.load()->name();
  return name.c_str();
}

// The address, or 0 with the message in ERROR (an OOM, as PyTorch words it).
SIM_TORCH_API uint64_t sim_torch_malloc(uint64_t size, int device, void* stream, int64_t context, char* error,
                                        size_t error_bytes) {
  std::string why;
  uint64_t addr = 0;
  if (is_native())
    addr = native().malloc(size, device, stream, context, why);
  else if (is_async())
    addr = Native::async_malloc(size, device, stream, why);
  else if (!(addr = reinterpret_cast<uint64_t>(allocator.load()->raw_alloc_with_stream(size, stream))))
    why = "CUDA out of memory (the pluggable allocator returned no memory)";
  if (!addr) say(error, error_bytes, why);
  return addr;
}

// RECORD_STREAM: the tensor was used on another stream (Tensor.record_stream): its block is back
// in the cache once that stream's work is done.
SIM_TORCH_API int sim_torch_free(uint64_t addr, int record_stream) {
  if (is_native()) return native().free(addr, record_stream != 0) ? 0 : -1;
  if (is_async()) return Native::async_free(addr) ? 0 : -1;
  allocator.load()->raw_delete(reinterpret_cast<void*>(addr));
  return 0;
}

SIM_TORCH_API void sim_torch_empty_cache() { allocator.load()->emptyCache(); }

// memoryStats (torch/csrc/cuda/Module.cpp): for allocation, segment, active, allocated_bytes,
// reserved_bytes, active_bytes and requested_bytes, each of all/small_pool/large_pool, current,
// peak, allocated and freed (84 values), then num_alloc_retries, num_ooms, num_device_alloc,
// num_device_free.
// 0, or -1 with ERROR: a pluggable allocator keeps no statistics ("CUDAPluggableAllocator does not
// yet support getDeviceStats", torch/csrc/cuda/CUDAPluggableAllocator.cpp).
SIM_TORCH_API int sim_torch_stats(int device, int64_t* out, char* error, size_t error_bytes) {
  Native::DeviceStats s;
  if (is_native()) {
    auto& devices = native().devices;
    if (device < 0 || static_cast<size_t>(device) >= devices.size()) {
      say(error, error_bytes, "Invalid device argument " + std::to_string(device) + ": did you call init?");
      return -1;
    }
    s = devices[static_cast<size_t>(device)]->stats();
  } else if (is_async()) {
    Native::async_stats(device, s);
  } else {
    say(error, error_bytes,
        "CUDAPluggableAllocator does not yet support getDeviceStats. If you need it, please file an issue describing "
        "your use case.");
    return -1;
  }
  size_t i = 0;
  s.for_each([&](Native::Stat& stat) {
    out[i++] = stat.current;
    out[i++] = stat.peak;
    out[i++] = stat.allocated;
    out[i++] = stat.freed;
  });
  out[i++] = s.num_alloc_retries;
  out[i++] = s.num_ooms;
  out[i++] = s.num_device_alloc;
  out[i++] = s.num_device_free;
  return 0;
}

// resetPeakStats: the native allocator's stats; the cudaMallocAsync backend's pool high-water
// marks (CUDAMallocAsyncAllocator.cpp: cudaMemPoolAttr{Reserved,Used}MemHigh set to 0); a
// pluggable allocator refuses.
SIM_TORCH_API int sim_torch_reset_peak(int device, char* error, size_t error_bytes) {
  if (is_native()) {
    native().resetPeakStats(static_cast<c10::DeviceIndex>(device));
  } else if (is_async()) {
    Native::async_reset_peaks(device);
  } else {
    say(error, error_bytes,
        "CUDAPluggableAllocator does not yet support resetPeakStats. If you need it, please file an issue describing "
        "your use case.");
    return -1;
  }
  return 0;
}
SIM_TORCH_API void sim_torch_reset_accumulated(int device) {
  if (is_native()) native().resetAccumulatedStats(static_cast<c10::DeviceIndex>(device));
}

// torch._C._cuda_attach_out_of_memory_observer: 0, or -1 with the allocator's refusal in ERROR.
SIM_TORCH_API int sim_torch_attach_oom_observer(void (*observer)(int64_t, int64_t, int64_t, int64_t), char* error,
                                                size_t error_bytes) {
  try {
    allocator.load()->attachOutOfMemoryObserver([observer](int64_t device, size_t allocated, size_t total,
                                                           size_t free_bytes) {
      observer(device, static_cast<int64_t>(allocated), static_cast<int64_t>(total), static_cast<int64_t>(free_bytes));
    });
  } catch (const std::exception& e) {
    say(error, error_bytes, e.what());
    return -1;
  }
  return 0;
}

// recordHistory (torch/csrc/cuda/memory_snapshot.cpp): ENABLED, the ring's MAX_ENTRIES, and from
// which CONTEXT_LEVEL frames are kept: 0 (never), 1 (state), 2 (alloc), 3 (all).
SIM_TORCH_API int sim_torch_record_history(int enabled, int context_level, uint64_t max_entries, char* error,
                                           size_t error_bytes) {
  if (!is_native()) {
    try {
      allocator.load()->recordHistory(enabled != 0, max_entries);
    } catch (const std::exception& e) {
      say(error, error_bytes, e.what());
      return -1;
    }
    return 0;
  }
  for (auto* d : native().devices) d->record_history(enabled != 0, context_level, max_entries);
  return 0;
}

// _cuda_memorySnapshot: {"segments": [...], "device_traces": [[...], ...]} as JSON, the frames
// as the stand-in's context ids (valid until the thread's next call); the other allocators
// refuse, with their message after a '!'.
SIM_TORCH_API const char* sim_torch_snapshot() {
  static thread_local std::string json;
  if (!is_native()) {
    json = is_async() ? "!Calling snapshot with backend:cudaMallocAsync is not meaningful. (For backend:native, "
                        "snapshot returns a detailed summary of all blocks tracked by the allocator, but the "
                        "cudaMallocAsync backend does not track individual blocks.)"
                      : "!CUDAPluggableAllocator does not yet support snapshot. If you need it, please file an issue "
                        "describing your use case.";
    return json.c_str();
  }
  std::string segments, traces;
  for (auto* d : native().devices) {
    std::string trace;
    d->snapshot(segments, trace);
    traces += (traces.empty() ? "[" : ",[") + trace + "]";
  }
  json = "{\"segments\":[" + segments + "],\"device_traces\":[" + traces + "]}";
  return json.c_str();
}

// torch.cuda.use_mem_pool(pool): _cuda_beginAllocateToPool with a filter taking every stream,
// the pool's own allocator (or none), and _cuda_endAllocateCurrentStreamToPool.
SIM_TORCH_API void sim_torch_begin_pool(int device, uint64_t id_first, uint64_t id_second, void* pool_allocator) {
  if (is_native() && device >= 0 && static_cast<size_t>(device) < native().devices.size())
    native().devices[static_cast<size_t>(device)]->begin_pool({id_first, id_second},
                                                              static_cast<CUDAAllocator*>(pool_allocator));
}
SIM_TORCH_API void sim_torch_release_pool(int device, uint64_t id_first, uint64_t id_second) {
  if (is_native() && device >= 0 && static_cast<size_t>(device) < native().devices.size())
    native().devices[static_cast<size_t>(device)]->release_pool({id_first, id_second});
}
SIM_TORCH_API void sim_torch_end_pool(int device) {
  if (is_native() && device >= 0 && static_cast<size_t>(device) < native().devices.size())
    native().devices[static_cast<size_t>(device)]->end_pool();
}

}  // extern "C"
