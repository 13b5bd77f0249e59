// What this process has in use on a device, as nvidia-smi shows it: NVML's per-process figure
// (nvmlDeviceGetComputeRunningProcesses_v3), by dlopen of libnvidia-ml.so.1 where the driver
// installed it. cudaMemGetInfo answers for the whole device; the difference is what other
// processes hold there. NVML knows devices by their UUID (it ignores CUDA_VISIBLE_DEVICES) and
// processes by their host pid: in a container with a pid namespace of its own, the process is not
// among those it lists, and memtrace says so once. MEMTRACE_NVML=0 keeps NVML out of the process.
#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "memtrace/ring/environment.h"
#include "session.h"
#include "settings.h"

namespace memtrace::inject {
namespace {

// NVML's C interface, the part memtrace calls (nvml.h is not part of the toolkit here).
using NvmlReturn = int;
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr NvmlReturn kNvmlInsufficientSize = 7;
using NvmlDevice = struct NvmlDeviceOpaque*;
struct NvmlProcessInfo {  // nvmlProcessInfo_t, as _v3 fills it
  unsigned int pid;
  unsigned long long usedGpuMemory;  // ULLONG_MAX: not available
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

struct Nvml {
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*device_by_uuid)(const char*, NvmlDevice*) = nullptr;
  NvmlReturn (*running_processes)(NvmlDevice, unsigned int*, NvmlProcessInfo*) = nullptr;
  bool usable = false;
};

const Nvml& nvml() {
  static Nvml n;
  static std::once_flag once;
  std::call_once(once, [] {
    const char* wanted = setting(env::kNvml);
    if (wanted && std::strcmp(wanted, "0") == 0) return;
    void* library = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!library) return;
    n.init = reinterpret_cast<decltype(n.init)>(::dlsym(library, "nvmlInit_v2"));
    n.device_by_uuid = reinterpret_cast<decltype(n.device_by_uuid)>(::dlsym(library, "nvmlDeviceGetHandleByUUID"));
    n.running_processes =
        reinterpret_cast<decltype(n.running_processes)>(::dlsym(library, "nvmlDeviceGetComputeRunningProcesses_v3"));
    n.usable = n.init && n.device_by_uuid && n.running_processes && n.init() == kNvmlSuccess;
  });
  return n;
}

}  // namespace

NvmlAnswer nvml_process_memory(const unsigned char (&uuid)[16], uint64_t& used) {
  const Nvml& n = nvml();
  if (!n.usable) return NvmlAnswer::kAbsent;
  char name[48];
  std::snprintf(name, sizeof name, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", uuid[0],
                uuid[1], uuid[2], uuid[3], uuid[4], uuid[5], uuid[6], uuid[7], uuid[8], uuid[9], uuid[10], uuid[11],
                uuid[12], uuid[13], uuid[14], uuid[15]);
  NvmlDevice device = nullptr;
  if (n.device_by_uuid(name, &device) != kNvmlSuccess) return NvmlAnswer::kAbsent;
  constexpr unsigned int kMostProcesses = 256;
  NvmlProcessInfo processes[kMostProcesses];
  unsigned int count = kMostProcesses;
  NvmlReturn r = n.running_processes(device, &count, processes);
  if (r == kNvmlInsufficientSize) return NvmlAnswer::kAbsent;  // a device more shared than we can list
  if (r != kNvmlSuccess) return NvmlAnswer::kAbsent;
  const auto self = static_cast<unsigned int>(::getpid());
  for (unsigned int i = 0; i < count && i < kMostProcesses; ++i) {
    if (processes[i].pid != self) continue;
    if (processes[i].usedGpuMemory == ULLONG_MAX) return NvmlAnswer::kAbsent;
    used = processes[i].usedGpuMemory;
    return NvmlAnswer::kListed;
  }
  return NvmlAnswer::kNotListed;
}

}  // namespace memtrace::inject
