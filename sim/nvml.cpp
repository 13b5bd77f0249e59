// The simulated device's NVML (libnvidia-ml.so.1): the calls memtrace makes. As NVIDIA's, it
// knows devices by UUID and physical index (it ignores CUDA_VISIBLE_DEVICES) and processes by
// their pid, listing what each has in use on a device: this process (its context, allocations and
// graphs' memory) and, when MEMTRACE_SIM_OTHER_PROCESSES_BYTES is set, one other process holding
// that much. MEMTRACE_SIM_NVML_PID_OFFSET=N lists this process under its pid plus N, as NVML lists
// a containerized process under its host pid.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "device_model.h"

namespace {

using NvmlReturn = int;
constexpr NvmlReturn kSuccess = 0;
constexpr NvmlReturn kUninitialized = 1;
constexpr NvmlReturn kInvalidArgument = 2;
constexpr NvmlReturn kNotFound = 6;
constexpr NvmlReturn kInsufficientSize = 7;

struct ProcessInfo {  // nvmlProcessInfo_t
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

bool g_initialized = false;

// A device handle: its ordinal plus one (0 is no device).
using Handle = void*;
int ordinal_of(Handle h) { return static_cast<int>(reinterpret_cast<intptr_t>(h)) - 1; }

std::string uuid_text(int ordinal) {
  unsigned char u[16];
  sim::device_uuid(ordinal, u);
  char text[48];
  std::snprintf(text, sizeof text, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
                u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
  return text;
}

}  // namespace

extern "C" {

NvmlReturn nvmlInit_v2() {
  g_initialized = true;
  return kSuccess;
}

NvmlReturn nvmlShutdown() {
  g_initialized = false;
  return kSuccess;
}

// Only devices this process can see are found here (the simulated device has no others).
NvmlReturn nvmlDeviceGetHandleByUUID(const char* uuid, Handle* device) {
  if (!g_initialized) return kUninitialized;
  if (!uuid || !device) return kInvalidArgument;
  for (int ordinal = 0; ordinal < sim::device_count(); ++ordinal) {
    if (uuid_text(ordinal) != uuid) continue;
    *device = reinterpret_cast<Handle>(static_cast<intptr_t>(ordinal + 1));
    return kSuccess;
  }
  return kNotFound;
}

NvmlReturn nvmlDeviceGetComputeRunningProcesses_v3(Handle device, unsigned int* count, ProcessInfo* infos) {
  if (!g_initialized) return kUninitialized;
  const int ordinal = ordinal_of(device);
  if (!count || !sim::valid_device(ordinal)) return kInvalidArgument;
  const char* offset = ::secure_getenv("MEMTRACE_SIM_NVML_PID_OFFSET");
  ProcessInfo listed[2];
  unsigned int n = 0;
  listed[n++] = ProcessInfo{static_cast<unsigned int>(::getpid() + (offset ? std::atoi(offset) : 0)),
                            sim::process_used(ordinal), 0xffffffff, 0xffffffff};
  if (sim::other_processes_bytes()) listed[n++] = ProcessInfo{1, sim::other_processes_bytes(), 0xffffffff, 0xffffffff};
  const bool fits = infos && *count >= n;
  if (fits) std::memcpy(infos, listed, n * sizeof *infos);
  *count = n;
  return fits ? kSuccess : kInsufficientSize;
}

}  // extern "C"
