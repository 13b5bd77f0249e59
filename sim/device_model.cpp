#include "device_model.h"

#include <cupti_activity.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "api_callbacks.h"
#include "memtrace/base/units.h"

namespace sim {
namespace {

// How CUPTI's memory activity records name each kind of memory.
int activity_kind(Memory memory) {
  switch (memory) {
    case Memory::kDevice: return CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
    case Memory::kManaged: return CUPTI_ACTIVITY_MEMORY_KIND_MANAGED;
    case Memory::kPinnedHost: return CUPTI_ACTIVITY_MEMORY_KIND_PINNED;
    case Memory::kImported: break;
  }
  return CUPTI_ACTIVITY_MEMORY_KIND_UNKNOWN;
}

constexpr uint64_t kDefaultCapacity = 80ull << 30;
constexpr uint64_t kDefaultContextOverhead = 300ull << 20;
constexpr uint64_t kUnbackedBase = 0x6000'0000'0000ull, kUnbackedEnd = 0x7000'0000'0000ull;

// A size from the environment, read as memtrace's options read sizes; FALLBACK when unset or not one.
uint64_t size_from_environment(const char* name, uint64_t fallback) {
  const char* text = ::secure_getenv(name);
  return text && *text ? memtrace::parse_size(text).value_or(fallback) : fallback;
}

struct Allocation {
  int device;
  Memory memory;
  uint64_t size;
  size_t mapped;  // bytes of host address space behind it
};

struct Physical {
  int device;
  uint64_t size;
  int fd;          // the memory; -1 for a multicast object
  int references;  // 1 for the handle until released, 1 per mapping
  bool released;
  bool counted = true;  // in its device's live bytes: not for imported memory or multicast objects
};

struct Mapping {
  uint64_t size;
  uint64_t handle;
};

struct DeviceState {
  uint64_t live = 0;  // the program's allocations
  uint64_t peak = 0;
  uint64_t graph_reserved = 0;  // CUDA graphs' memory
};

struct Model {
  std::mutex mutex;
  int devices = 1;
  uint64_t capacity = kDefaultCapacity;
  uint64_t overhead = kDefaultContextOverhead;
  uint64_t other_processes = 0;
  std::vector<DeviceState> state;
  std::map<uint64_t, Allocation> allocations;
  // MEMTRACE_SIM_UNBACKED=1: device memory is addresses alone, handed out from a range where
  // nothing is mapped, without a system call. For benchmarks: mmap and munmap would otherwise
  // bury the cost of the call being measured. Such memory cannot be copied to or set.
  bool unbacked = false;
  uint64_t next_unbacked = kUnbackedBase;
  std::map<uint64_t, Physical> handles;
  std::map<uint64_t, uint64_t> reservations;  // address -> size
  std::map<uint64_t, Mapping> mappings;
  uint64_t next_handle = 0x1000;

  Model() { configure(); }
  void configure() {
    const char* count = ::secure_getenv("MEMTRACE_SIM_DEVICES");
    devices = count ? std::atoi(count) : 1;
    if (devices < 0) devices = 0;
    if (devices > 64) devices = 64;
    capacity = size_from_environment("MEMTRACE_SIM_CAPACITY", kDefaultCapacity);
    overhead = size_from_environment("MEMTRACE_SIM_CONTEXT_BYTES", kDefaultContextOverhead);
    if (overhead > capacity / 4) overhead = capacity / 4;
    other_processes = size_from_environment("MEMTRACE_SIM_OTHER_PROCESSES_BYTES", 0);
    if (other_processes > capacity / 4) other_processes = capacity / 4;
    state.assign(static_cast<size_t>(devices), DeviceState());
    const char* unbacked_env = ::secure_getenv("MEMTRACE_SIM_UNBACKED");
    unbacked = unbacked_env && std::strcmp(unbacked_env, "1") == 0;
  }
};

Model& model() {
  static Model* m = new Model;  // never destroyed: programs free device memory in static destructors
  return *m;
}

// A forked child starts with a fresh device: what its parent held is not its own.
void reset_after_fork() {
  Model& m = model();
  new (&m.mutex) std::mutex;
  m.allocations.clear();
  m.handles.clear();
  m.reservations.clear();
  m.mappings.clear();
  m.state.assign(static_cast<size_t>(m.devices), DeviceState());
}

__attribute__((constructor)) void install_fork_handler() { ::pthread_atfork(nullptr, nullptr, reset_after_fork); }

size_t page_round(uint64_t size) {
  const uint64_t page = 4096;
  return static_cast<size_t>((size + page - 1) / page * page);
}

uint64_t process_used(Model& m, int device) {
  const DeviceState& s = m.state[static_cast<size_t>(device)];
  return m.overhead + s.live + s.graph_reserved;
}
uint64_t used(Model& m, int device) { return process_used(m, device) + m.other_processes; }

bool fits(Model& m, int device, uint64_t size) { return size <= m.capacity - used(m, device); }

void add_live(Model& m, int device, int64_t delta) {
  DeviceState& s = m.state[static_cast<size_t>(device)];
  s.live = static_cast<uint64_t>(static_cast<int64_t>(s.live) + delta);
  if (s.live > s.peak) s.peak = s.live;
  ledger_device_changed(device, s.live, s.peak);
}

void drop_reference(Model& m, std::map<uint64_t, Physical>::iterator it) {
  if (--it->second.references > 0) return;
  if (it->second.counted) add_live(m, it->second.device, -static_cast<int64_t>(it->second.size));
  if (it->second.fd >= 0) ::close(it->second.fd);
  m.handles.erase(it);
}

}  // namespace

int device_count() { return model().devices; }
bool backed(uint64_t addr, uint64_t bytes) {
  return bytes == 0 || addr + bytes <= kUnbackedBase || addr >= kUnbackedEnd || !model().unbacked;
}
uint64_t device_capacity() { return model().capacity; }
uint64_t context_overhead() { return model().overhead; }
uint64_t other_processes_bytes() { return model().other_processes; }
uint64_t process_used(int device) {
  Model& m = model();
  std::lock_guard lock(m.mutex);
  return valid_device(device) ? process_used(m, device) : 0;
}
bool valid_device(int device) { return device >= 0 && device < model().devices; }

void memory_info(int device, uint64_t* free_bytes, uint64_t* total_bytes) {
  Model& m = model();
  std::lock_guard lock(m.mutex);
  *total_bytes = m.capacity;
  *free_bytes = m.capacity - used(m, device);
}

Status reserve_graph_memory(int device, uint64_t bytes) {
  Model& m = model();
  std::lock_guard lock(m.mutex);
  if (!valid_device(device)) return Status::kInvalidDevice;
  uint64_t& reserved = m.state[static_cast<size_t>(device)].graph_reserved;
  if (bytes <= reserved) return Status::kOk;
  if (!fits(m, device, bytes - reserved)) return Status::kOutOfMemory;
  reserved = bytes;
  return Status::kOk;
}

uint64_t graph_memory(int device) {
  Model& m = model();
  std::lock_guard lock(m.mutex);
  return valid_device(device) ? m.state[static_cast<size_t>(device)].graph_reserved : 0;
}

void trim_graph_memory(int device) {
  Model& m = model();
  std::lock_guard lock(m.mutex);
  if (valid_device(device)) m.state[static_cast<size_t>(device)].graph_reserved = 0;
}

Status allocate(Memory memory, int device, uint64_t size, uint64_t* addr) {
  Model& m = model();
  std::lock_guard lock(m.mutex);
  bool on_device = memory != Memory::kPinnedHost;
  bool counted = on_device && memory != Memory::kImported;  // in the device's live bytes
  if (on_device && !valid_device(device)) return Status::kInvalidDevice;
  if (counted && !fits(m, device, size)) return Status::kOutOfMemory;
  if (m.unbacked && memory == Memory::kDevice) {
    const uint64_t step = (size + 511) / 256 * 256;  // 256-byte aligned, with a gap after each
    if (m.next_unbacked + step > kUnbackedEnd) return Status::kOutOfMemory;
    *addr = m.next_unbacked;
    m.next_unbacked += step;
    m.allocations[*addr] = Allocation{device, memory, size, 0};
    add_live(m, device, static_cast<int64_t>(size));
    memory_activity(false, activity_kind(memory), *addr, size, device);
    return Status::kOk;
  }
  size_t bytes = page_round(size == 0 ? 1 : size);
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return Status::kOutOfMemory;
  *addr = reinterpret_cast<uint64_t>(p);
  m.allocations[*addr] = Allocation{on_device ? device : -1, memory, size, bytes};
  if (counted) add_live(m, device, static_cast<int64_t>(size));
  if (memory != Memory::kImported) memory_activity(false, activity_kind(memory), *addr, size, on_device ? device : -1);
  return Status::kOk;
}

Status release(uint64_t addr, bool host_memory, uint64_t* size) {
  Model& m = model();
  std::lock_guard lock(m.mutex);
  auto it = m.allocations.find(addr);
  if (it == m.allocations.end() || (it->second.memory == Memory::kPinnedHost) != host_memory)
    return Status::kInvalidValue;
  *size = it->second.size;
  const Memory memory = it->second.memory;
  if (memory != Memory::kPinnedHost && memory != Memory::kImported)
    add_live(m, it->second.device, -static_cast<int64_t>(it->second.size));
  if (memory != Memory::kImported)
    memory_activity(true, activity_kind(memory), addr, it->second.size, it->second.device);
  if (it->second.mapped) ::munmap(reinterpret_cast<void*>(addr), it->second.mapped);
  m.allocations.erase(it);
  return Status::kOk;
}

void reset_device(int device) {
  Model& m = model();
  std::lock_guard lock(m.mutex);
  for (auto it = m.allocations.begin(); it != m.allocations.end();) {
    if (it->second.device == device) {
      if (it->second.memory != Memory::kImported) add_live(m, device, -static_cast<int64_t>(it->second.size));
      if (it->second.mapped) ::munmap(reinterpret_cast<void*>(it->first), it->second.mapped);
      it = m.allocations.erase(it);
    } else {
      ++it;
    }
  }
}

Status address_range(uint64_t addr, uint64_t* base, uint64_t* size, Memory* memory) {
  Model& m = model();
  std::lock_guard lock(m.mutex);
  auto it = m.allocations.upper_bound(addr);
  if (it == m.allocations.begin()) return Status::kNotFound;
  --it;
  if (addr >= it->first + (it->second.size ? it->second.size : 1)) return Status::kNotFound;
  *base = it->first;
  *size = it->second.size;
  if (memory) *memory = it->second.memory;
  return Status::kOk;
}

Status vmm_create(int device, uint64_t size, uint64_t* handle) {
  Model& m = model();
  std::lock_guard lock(m.mutex);
  if (!valid_device(device)) return Status::kInvalidDevice;
  if (size == 0 || size % kVmmGranularity != 0) return Status::kInvalidValue;
  if (!fits(m, device, size)) return Status::kOutOfMemory;
  // Named after its device, so that a process that imports it knows where it lies.
  const std::string name = "memtrace-sim-vmm-device-" + std::to_string(device);
  int fd = static_cast<int>(::syscall(SYS_memfd_create, name.c_str(), 1u /* MFD_CLOEXEC */));
  if (fd < 0) return Status::kOutOfMemory;
  if (::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    ::close(fd);
    return Status::kOutOfMemory;
  }
  *handle = m.next_handle++;
  m.handles[*handle] = Physical{device, size, fd, 1, false};
  add_live(m, device, static_cast<int64_t>(size));
  return Status::kOk;
}

Status vmm_release(uint64_t handle, uint64_t* size) {
  Model& m = model();
  std::lock_guard lock(m.mutex);
  auto it = m.handles.find(handle);
  if (it == m.handles.end() || it->second.released) return Status::kInvalidValue;
  *size = it->second.size;
  it->second.released = true;
  drop_reference(m, it);  // the memory stays while mappings of it remain, as on a GPU
  return Status::kOk;
}

Status vmm_reserve(uint64_t size, uint64_t alignment, uint64_t* addr) {
  Model& m = model();
  if (size == 0 || size % kVmmGranularity != 0) return Status::kInvalidValue;
  uint64_t align = alignment > kVmmGranularity ? alignment : kVmmGranularity;
  if (align & (align - 1)) return Status::kInvalidValue;
  size_t span = static_cast<size_t>(size + align);
  void* p = ::mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return Status::kOutOfMemory;
  uint64_t start = reinterpret_cast<uint64_t>(p);
  uint64_t aligned = (start + align - 1) & ~(align - 1);
  if (aligned > start) ::munmap(p, static_cast<size_t>(aligned - start));
  uint64_t end = start + span;
  if (end > aligned + size)
    ::munmap(reinterpret_cast<void*>(aligned + size), static_cast<size_t>(end - aligned - size));
  std::lock_guard lock(m.mutex);
  m.reservations[aligned] = size;
  *addr = aligned;
  return Status::kOk;
}

Status vmm_free_reservation(uint64_t addr, uint64_t size) {
  Model& m = model();
  std::lock_guard lock(m.mutex);
  auto it = m.reservations.find(addr);
  if (it == m.reservations.end() || it->second != size) return Status::kInvalidValue;
  auto mapped = m.mappings.lower_bound(addr);
  if (mapped != m.mappings.end() && mapped->first < addr + size) return Status::kInvalidValue;  // unmap first
  ::munmap(reinterpret_cast<void*>(addr), static_cast<size_t>(size));
  m.reservations.erase(it);
  return Status::kOk;
}

Status vmm_map(uint64_t addr, uint64_t size, uint64_t offset, uint64_t handle) {
  Model& m = model();
  std::lock_guard lock(m.mutex);
  auto h = m.handles.find(handle);
  if (h == m.handles.end() || h->second.released || h->second.fd < 0 || size == 0 || size % kVmmGranularity ||
      offset % kVmmGranularity || offset + size > h->second.size)
    return Status::kInvalidValue;
  auto r = m.reservations.upper_bound(addr);
  if (r == m.reservations.begin()) return Status::kInvalidValue;
  --r;
  if (addr < r->first || addr + size > r->first + r->second) return Status::kInvalidValue;
  auto next = m.mappings.lower_bound(addr);
  if (next != m.mappings.end() && next->first < addr + size) return Status::kInvalidValue;
  if (next != m.mappings.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second.size > addr) return Status::kInvalidValue;
  }
  // Inaccessible until cuMemSetAccess, as on a GPU.
  if (::mmap(reinterpret_cast<void*>(addr), static_cast<size_t>(size), PROT_NONE, MAP_SHARED | MAP_FIXED, h->second.fd,
             static_cast<off_t>(offset)) == MAP_FAILED)
    return Status::kOutOfMemory;
  m.mappings[addr] = Mapping{size, handle};
  ++h->second.references;
  return Status::kOk;
}

Status vmm_unmap(uint64_t addr, uint64_t size, uint64_t* bytes) {
  Model& m = model();
  std::lock_guard lock(m.mutex);
  auto it = m.mappings.lower_bound(addr);
  if (it == m.mappings.end() || it->first != addr) return Status::kInvalidValue;
  *bytes = 0;
  while (it != m.mappings.end() && it->first < addr + size) {
    ::mmap(reinterpret_cast<void*>(it->first), static_cast<size_t>(it->second.size), PROT_NONE,
           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    *bytes += it->second.size;
    auto h = m.handles.find(it->second.handle);
    if (h != m.handles.end()) drop_reference(m, h);
    it = m.mappings.erase(it);
  }
  return Status::kOk;
}

Status vmm_handle_device(uint64_t handle, int* device) {
  Model& m = model();
  std::lock_guard lock(m.mutex);
  auto it = m.handles.find(handle);
  if (it == m.handles.end() || it->second.released) return Status::kInvalidValue;
  *device = it->second.device;
  return Status::kOk;
}

Status vmm_export(uint64_t handle, int* fd) {
  Model& m = model();
  std::lock_guard lock(m.mutex);
  auto it = m.handles.find(handle);
  if (it == m.handles.end() || it->second.released || it->second.fd < 0) return Status::kInvalidValue;
  *fd = ::dup(it->second.fd);  // without close-on-exec: it is handed to other processes
  return *fd >= 0 ? Status::kOk : Status::kInvalidValue;
}

Status vmm_import(int fd, uint64_t* handle) {
  struct stat st {};
  char link[64], target[256] = {};
  std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  const ssize_t n = ::readlink(link, target, sizeof target - 1);
  const char* tag = n > 0 ? std::strstr(target, "memtrace-sim-vmm-device-") : nullptr;
  if (!tag || ::fstat(fd, &st) != 0) return Status::kInvalidValue;  // not memory this device exported
  const int device = std::atoi(tag + std::strlen("memtrace-sim-vmm-device-"));
  int own = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (own < 0) return Status::kInvalidValue;
  Model& m = model();
  std::lock_guard lock(m.mutex);
  *handle = m.next_handle++;
  m.handles[*handle] = Physical{device, static_cast<uint64_t>(st.st_size), own, 1, false, false};
  return Status::kOk;
}

Status multicast_create(uint64_t size, uint64_t* handle) {
  if (size == 0 || size % kVmmGranularity != 0) return Status::kInvalidValue;
  Model& m = model();
  std::lock_guard lock(m.mutex);
  *handle = m.next_handle++;
  m.handles[*handle] = Physical{-1, size, -1, 1, false, false};
  return Status::kOk;
}

Status vmm_set_access(uint64_t addr, uint64_t size) {
  Model& m = model();
  std::lock_guard lock(m.mutex);
  auto it = m.mappings.find(addr);
  if (it == m.mappings.end()) return Status::kInvalidValue;
  return ::mprotect(reinterpret_cast<void*>(addr), static_cast<size_t>(size), PROT_READ | PROT_WRITE) == 0
             ? Status::kOk
             : Status::kInvalidValue;
}

}  // namespace sim

namespace sim {

Status pointer_device(uint64_t addr, int* device) {
  Model& m = model();
  std::lock_guard lock(m.mutex);
  auto a = m.allocations.upper_bound(addr);
  if (a != m.allocations.begin() && addr < std::prev(a)->first + std::prev(a)->second.size) {
    *device = std::prev(a)->second.device;
    return Status::kOk;
  }
  auto map = m.mappings.upper_bound(addr);
  if (map != m.mappings.begin() && addr < std::prev(map)->first + std::prev(map)->second.size) {
    auto h = m.handles.find(std::prev(map)->second.handle);
    if (h != m.handles.end()) {
      *device = h->second.device;
      return Status::kOk;
    }
  }
  return Status::kNotFound;
}

int physical_index(int ordinal) {
  const char* visible = ::secure_getenv("CUDA_VISIBLE_DEVICES");
  if (!visible || !*visible) return ordinal;
  std::string list(visible);
  size_t at = 0;
  for (int i = 0; at <= list.size(); ++i) {
    size_t comma = list.find(',', at);
    std::string item = list.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    if (i == ordinal) return item.empty() ? ordinal : std::atoi(item.c_str());
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return ordinal;
}

void device_uuid(int ordinal, unsigned char (&uuid)[16]) {
  const unsigned physical = static_cast<unsigned>(physical_index(ordinal));
  static const unsigned char kBase[16] = {0x5e, 0x1a, 0x7e, 0xd0, 0x0d, 0xe7, 0x4c, 0x1e,
                                          0x9a, 0x11, 0x0c, 0xa7, 0xed, 0x00, 0x00, 0x00};
  for (int i = 0; i < 16; ++i) uuid[i] = kBase[i];
  uuid[13] = static_cast<unsigned char>(physical >> 16);
  uuid[14] = static_cast<unsigned char>(physical >> 8);
  uuid[15] = static_cast<unsigned char>(physical);
}

}  // namespace sim

extern "C" uint64_t memtrace_sim_allocation_size(uint64_t addr) {
  {
    sim::Model& m = sim::model();
    std::lock_guard lock(m.mutex);
    auto it = m.allocations.find(addr);
    if (it != m.allocations.end()) return it->second.size;
  }
  return sim::graph_allocation_size(addr);
}
