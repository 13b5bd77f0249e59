// What memtrace asks CUDA while recording a call: the current device, the device a pointer lies
// on, whether a stream is being captured, what a device had left after an allocation failed,
// and the devices' names, sizes and UUIDs. Each question goes to the CUDA library of the module
// that made the call (real_function.h), and only to entry points that leave the program's state
// alone: the driver's queries set no sticky "last error", and none of them synchronizes, so they
// are allowed during stream capture.
#include <cuda.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "interpose.h"
#include "memtrace/ring/environment.h"
#include "memtrace/ring/producer.h"
#include "memtrace/ring/protocol.h"
#include "settings.h"

namespace memtrace::inject {

namespace {
using GetDevice = RealFunction<int (*)(int*)>;
int current_device(GetDevice& get_device, uint64_t caller) {
  int device = -1;
  auto fn = get_device.get(caller);
  return fn && fn(&device) == 0 ? device : -1;
}
}  // namespace

int runtime_device(uint64_t caller) {
  static GetDevice get_device("cudaGetDevice", Library::kRuntime);
  return current_device(get_device, caller);
}

int driver_device(uint64_t caller) {
  static GetDevice get_device("cuCtxGetDevice", Library::kDriver);
  return current_device(get_device, caller);
}

int pointer_device(uint64_t caller, uint64_t addr, int fallback) {
  static RealFunction<decltype(&cuPointerGetAttribute)> get_attribute("cuPointerGetAttribute", Library::kDriver);
  int device = -1;
  auto fn = get_attribute.get(caller);
  if (!fn || fn(&device, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, addr) != CUDA_SUCCESS || device < 0) return fallback;
  return device;
}

int handle_device(uint64_t caller, uint64_t handle) {
  static RealFunction<decltype(&cuMemGetAllocationPropertiesFromHandle)> get_properties(
      "cuMemGetAllocationPropertiesFromHandle", Library::kDriver);
  auto fn = get_properties.get(caller);
  CUmemAllocationProp prop{};
  return handle && fn && fn(&prop, handle) == CUDA_SUCCESS && prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE
             ? prop.location.id
             : -1;
}

uint64_t allocation_size(uint64_t caller, uint64_t addr) {
  static RealFunction<decltype(&cuMemGetAddressRange_v2)> get_range("cuMemGetAddressRange_v2", Library::kDriver);
  auto fn = get_range.get(caller);
  CUdeviceptr base = 0;
  size_t size = 0;
  return fn && fn(&base, &size, addr) == CUDA_SUCCESS ? size : 0;
}

bool stream_capturing(uint64_t caller, const void* stream, bool per_thread) {
  // The legacy stream cannot be captured, and asking about it while another stream captures
  // is an error (cudaErrorStreamCaptureImplicit): it is never asked about.
  if (stream == CU_STREAM_LEGACY || (!stream && !per_thread)) return false;
  static RealFunction<CUresult (*)(CUstream, CUstreamCaptureStatus*)> is_capturing("cuStreamIsCapturing",
                                                                                   Library::kDriver);
  auto fn = is_capturing.get(caller);
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  auto handle = stream ? static_cast<CUstream>(const_cast<void*>(stream)) : CU_STREAM_PER_THREAD;
  return fn && fn(handle, &status) == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_NONE;
}

bool query_device_memory(uint64_t caller, uint64_t& free_bytes, uint64_t& total_bytes) {
  static RealFunction<int (*)(size_t*, size_t*)> get_info("cuMemGetInfo_v2", Library::kDriver);
  auto fn = get_info.get(caller);
  size_t f = 0, t = 0;
  if (!fn || fn(&f, &t) != 0) return false;
  free_bytes = f;
  total_bytes = t;
  return true;
}

namespace {

uint64_t sample_interval_ns() {
  static const uint64_t ns = [] {
    const char* v = setting(env::kSampleIntervalUs);
    char* end = nullptr;
    unsigned long long us = v ? std::strtoull(v, &end, 10) : 1000;
    return (v && (end == v || *end)) ? 1'000'000ull : us * 1000;
  }();
  return ns;
}
constexpr uint64_t kAlwaysSampledBytes = 64 << 20;  // an allocation this large may make the peak
constexpr int kSampledDevices = 64;
std::atomic<uint64_t> g_last_sample[kSampledDevices];

void publish_observation(Api api, int device, uint64_t size, uint64_t free_bytes = 0, uint64_t total_bytes = 0) {
  Event e;
  e.api = api;
  e.kind = MemKind::kDevice;
  e.layer = Layer::kDevice;
  e.device = device;
  e.size = size;
  e.device_free = free_bytes;
  e.device_total = total_bytes;
  publish(e, stamp(e), nullptr);
}

// What the device's current pool holds beyond its allocations, and CUDA graphs hold; each only
// when it changed since the last sample of the device (0 when the driver cannot say).
std::atomic<uint64_t> g_last_pool_held[kSampledDevices], g_last_graph_reserved[kSampledDevices];

void sample_pools_and_graphs(uint64_t caller, int device) {
  static RealFunction<decltype(&cuDeviceGetMemPool)> get_pool("cuDeviceGetMemPool", Library::kDriver);
  static RealFunction<decltype(&cuMemPoolGetAttribute)> pool_attribute("cuMemPoolGetAttribute", Library::kDriver);
  static RealFunction<decltype(&cuDeviceGetGraphMemAttribute)> graph_attribute("cuDeviceGetGraphMemAttribute",
                                                                               Library::kDriver);
  uint64_t held = 0, graphs = 0;
  CUmemoryPool pool = nullptr;
  cuuint64_t reserved = 0, used = 0, graph_reserved = 0;
  auto get_pool_fn = get_pool.get(caller);
  auto pool_fn = pool_attribute.get(caller);
  if (get_pool_fn && pool_fn && get_pool_fn(&pool, device) == CUDA_SUCCESS &&
      pool_fn(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved) == CUDA_SUCCESS &&
      pool_fn(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used) == CUDA_SUCCESS && reserved > used)
    held = reserved - used;
  auto graph_fn = graph_attribute.get(caller);
  if (graph_fn && graph_fn(device, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &graph_reserved) == CUDA_SUCCESS)
    graphs = graph_reserved;
  if (g_last_pool_held[device].exchange(held, std::memory_order_relaxed) != held)
    publish_observation(Api::kDevicePoolHeld, device, held);
  if (g_last_graph_reserved[device].exchange(graphs, std::memory_order_relaxed) != graphs)
    publish_observation(Api::kDeviceGraphReserved, device, graphs);
}

// The UUID of the device with ORDINAL; false when the driver cannot say (before CUDA 11.4).
bool device_uuid(uint64_t caller, int ordinal, unsigned char (&uuid)[16]) {
  static RealFunction<int (*)(int*, int)> get("cuDeviceGet", Library::kDriver);
  static RealFunction<int (*)(CUuuid*, int)> get_uuid("cuDeviceGetUuid_v2", Library::kDriver);
  auto get_fn = get.get(caller);
  auto uuid_fn = get_uuid.get(caller);
  int device = 0;
  CUuuid id{};
  if (!get_fn || !uuid_fn || get_fn(&device, ordinal) != 0 || uuid_fn(&id, device) != 0) return false;
  std::memcpy(uuid, id.bytes, sizeof uuid);
  return true;
}

// What other processes hold on the device: its use minus this process's, as NVML tells it, a
// tenth of a second apart at most per device (NVML answers far slower than cudaMemGetInfo), and
// whenever the device's use passed its most at the last reading by 1%: so that at the peak,
// NVML's figure is of the peak.
constexpr uint64_t kNvmlInterval = 100'000'000;  // ns
std::atomic<uint64_t> g_last_nvml[kSampledDevices];
std::atomic<uint64_t> g_nvml_most_used[kSampledDevices];        // the device's use at its most NVML read
std::atomic<uint64_t> g_last_other_processes[kSampledDevices];  // plus one: 0 for none published
std::atomic<uint64_t> g_last_nvml_mine[kSampledDevices];        // plus one: 0 for none published
std::atomic<bool> g_nvml_not_listed_said{false};

void sample_other_processes(uint64_t caller, int device, uint64_t used, uint64_t now) {
  uint64_t before = g_last_nvml[device].load(std::memory_order_relaxed);
  const uint64_t most = g_nvml_most_used[device].load(std::memory_order_relaxed);
  if (before && now - before < kNvmlInterval && used <= most + most / 100) return;
  if (!g_last_nvml[device].compare_exchange_strong(before, now, std::memory_order_relaxed)) return;
  if (used > most) g_nvml_most_used[device].store(used, std::memory_order_relaxed);
  unsigned char uuid[16];
  uint64_t mine = 0;
  if (!device_uuid(caller, device, uuid)) return;
  switch (nvml_process_memory(uuid, mine)) {
    case NvmlAnswer::kAbsent: return;
    case NvmlAnswer::kNotListed:
      if (!g_nvml_not_listed_said.exchange(true))
        publish_notice("NVML does not list this process among those using device " + std::to_string(device) +
                       " (it knows processes by their host pid: a container's own pid namespace hides them), so "
                       "what other processes hold there is not told apart from the rest of the device layer");
      return;
    case NvmlAnswer::kListed: break;
  }
  const uint64_t others = used > mine ? used - mine : 0;  // the first answer is published even when 0
  const bool others_changed =
      g_last_other_processes[device].exchange(others + 1, std::memory_order_relaxed) != others + 1;
  const bool mine_changed = g_last_nvml_mine[device].exchange(mine + 1, std::memory_order_relaxed) != mine + 1;
  if (others_changed || mine_changed) {
    publish_observation(Api::kDeviceProcessUsed, device, mine);
    publish_observation(Api::kDeviceOtherProcesses, device, others);
  }
}

}  // namespace

void sample_device_memory(uint64_t caller, int device, uint64_t bytes, uint64_t now_ns) {
  if (device < 0 || device >= kSampledDevices) return;
  const uint64_t now = now_ns ? now_ns : ring::monotonic_ns();
  std::atomic<uint64_t>& last = g_last_sample[device];
  uint64_t before = last.load(std::memory_order_relaxed);
  if (before && now - before < sample_interval_ns() && bytes < kAlwaysSampledBytes) return;
  if (!last.compare_exchange_strong(before, now, std::memory_order_relaxed)) return;  // another thread samples
  if (driver_device(caller) != device) return;  // cuMemGetInfo would answer for another device
  uint64_t free_bytes = 0, total_bytes = 0;
  if (!query_device_memory(caller, free_bytes, total_bytes)) return;
  const uint64_t used = total_bytes > free_bytes ? total_bytes - free_bytes : 0;
  sample_pools_and_graphs(caller, device);  // first: the used figure below includes them
  sample_other_processes(caller, device, used, now);
  publish_observation(Api::kDeviceUsed, device, used, free_bytes, total_bytes);
}

bool query_devices(uint64_t caller, std::string& payload, uint32_t& count) {
  static RealFunction<int (*)(int*)> get_count("cuDeviceGetCount", Library::kDriver);
  static RealFunction<int (*)(int*, int)> get("cuDeviceGet", Library::kDriver);
  static RealFunction<int (*)(char*, int, int)> get_name("cuDeviceGetName", Library::kDriver);
  static RealFunction<int (*)(size_t*, int)> total_mem("cuDeviceTotalMem_v2", Library::kDriver);
  auto count_fn = get_count.get(caller);
  auto get_fn = get.get(caller);
  auto name_fn = get_name.get(caller);
  auto total_fn = total_mem.get(caller);
  int devices = 0;
  if (!count_fn || !get_fn || !name_fn || !total_fn || count_fn(&devices) != 0 || devices <= 0) return false;
  if (devices > 64) devices = 64;
  count = 0;
  payload.clear();
  for (int i = 0; i < devices; ++i) {
    int device = 0;
    char name[256] = {};
    size_t total = 0;
    if (get_fn(&device, i) != 0) continue;
    name_fn(name, sizeof name - 1, device);
    total_fn(&total, device);
    ring::DeviceEntry entry{i, static_cast<uint32_t>(std::strlen(name)), total, {}};
    device_uuid(caller, i, entry.uuid);  // optional: drivers older than 11.4 cannot say
    payload.append(reinterpret_cast<const char*>(&entry), sizeof entry).append(name, entry.name_bytes);
    ++count;
  }
  return count > 0;
}

}  // namespace memtrace::inject
