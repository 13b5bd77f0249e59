// The replay engine: walks events in order and keeps the live set, so every analyzer learns what
// each event did to memory (which allocation a free released, how device memory changed).
// Memory grows with the live set, never with the trace's length.
#pragma once

#include <climits>
#include <cstdint>
#include <map>
#include <unordered_map>
#include <vector>

#include "memtrace/base/address_map.h"
#include "memtrace/format/event.h"

namespace memtrace {

struct LiveAllocation {
  Api api = Api::kUnknown;
  MemKind kind = MemKind::kUnknown;
  int32_t device = -1;
  uint64_t size = 0;
  uint64_t stack_id = 0;
  uint64_t t_ns = 0;
  uint32_t tid = 0;
  uint64_t heap = 0;  // a region: its heap

  // The event that made it, at ADDR.
  Event as_event(uint64_t addr) const {
    Event e;
    e.t_ns = t_ns;
    e.tid = tid;
    e.api = api;
    e.kind = kind;
    e.layer = api_info(api).layer;
    e.device = device;
    e.addr = addr;
    e.size = size;
    e.heap = heap;
    e.stack_id = stack_id;
    return e;
  }
};

// Where device memory was allocated: the API and the call stack. Reports group by it.
struct Site {
  Api api = Api::kUnknown;
  uint64_t stack_id = 0;
  bool operator==(const Site&) const = default;
};

struct SiteHash {
  size_t operator()(const Site& s) const {
    return std::hash<uint64_t>()(s.stack_id * 64 + static_cast<uint64_t>(s.api));
  }
};

// Device memory (device, managed, VMM physical) that came or went on one device with an event,
// in the reserved layer, or in the allocated layer (regions an allocator handed out of its heaps).
struct MemoryChange {
  int32_t device = -1;
  int64_t bytes = 0;
  Site site;
  Layer layer = Layer::kReserved;
  uint64_t addr = 0;  // what came or went: an address or a VMM handle; allocated layer: the region,
                      // and the heap it lies in
  uint64_t heap = 0;
  // An allocation came (else one went). Not the sign of BYTES: a zero-byte allocation
  // (cudaMalloc(&p, 0) succeeds) has none, and counted as a free it made live counts negative.
  bool arrived = false;
};

// An allocator's pool, as it described it (through NVTX, or PyTorch's own events): the range its
// regions lie in.
struct Heap {
  uint64_t size = 0;
  int32_t device = -1;
};

// What one event did.
struct ReplayStep {
  const Event* event = nullptr;
  // For an allocation, its own; for a free, those of what it freed (when it found it).
  MemKind kind = MemKind::kUnknown;
  int32_t device = -1;
  uint64_t size = 0;
  bool matched = true;                       // false: a successful free of something the trace never saw allocated
  std::vector<MemoryChange> memory_changes;  // device memory, in the reserved and allocated layers
  int64_t pinned_host_bytes = 0;
};

// Bytes live per device. Nearly every event names the device the one before it named, so that
// device's entry is kept at hand rather than looked up in the map on every event.
class BytesByDevice {
 public:
  BytesByDevice() = default;
  BytesByDevice(const BytesByDevice& other) : map_(other.map_) {}
  BytesByDevice& operator=(const BytesByDevice& other) {
    map_ = other.map_;
    device_ = kNone;
    return *this;
  }
  // (A trace may name any device, INT32_MIN too: nothing at hand until something was.)
  uint64_t& operator[](int32_t device) {
    if (device != device_ || !at_) {  // std::map's nodes stay put: the pointer stays good
      at_ = &map_[device];
      device_ = device;
    }
    return *at_;
  }
  uint64_t get(int32_t device) const {
    if (device == device_ && at_) return *at_;
    auto it = map_.find(device);
    return it == map_.end() ? 0 : it->second;
  }
  const std::map<int32_t, uint64_t>& map() const { return map_; }

 private:
  static constexpr int32_t kNone = INT32_MIN;
  std::map<int32_t, uint64_t> map_;
  int32_t device_ = kNone;
  uint64_t* at_ = nullptr;
};

class Replay {
 public:
  // Applies EVENT; the step stays valid until the next call.
  const ReplayStep& apply(const Event& event);

  // Device memory live per device now (reserved layer).
  const std::map<int32_t, uint64_t>& device_bytes() const { return device_bytes_.map(); }
  const std::map<uint64_t, Heap>& heaps() const { return heaps_; }
  // What LAYER (reserved or allocated) holds on DEVICE now.
  uint64_t live_bytes(Layer layer, int32_t device) const {
    return (layer == Layer::kAllocated ? allocated_bytes_ : device_bytes_).get(device);
  }
  // The reserved layer on every device together: what a process's own peak is a peak of.
  uint64_t reserved_bytes() const { return reserved_bytes_; }
  // The allocated layer on every device together.
  uint64_t allocated_bytes() const { return allocated_total_; }
  uint64_t pinned_host_bytes() const { return pinned_host_bytes_; }
  size_t live_count() const { return addresses_.size() + handles_.size() + mappings_.size() + reservations_.size(); }
  uint64_t unmatched_frees() const { return unmatched_frees_; }

  // Calls FN(address, allocation) for everything live now that holds memory or addresses:
  // device, managed and pinned host allocations, VMM physical handles (by handle), reservations.
  template <typename Fn>
  void for_each_live(Fn&& fn) const {
    addresses_.for_each([&](uint64_t addr, uint32_t index) { fn(addr, pool_[index]); });
    for (const auto& [handle, h] : handles_) fn(handle, h.allocation);
    for (const auto& [addr, a] : reservations_) fn(addr, a);
  }
  // The allocated layer's live regions (blocks handed out of the heaps), by address.
  const std::map<uint64_t, LiveAllocation>& regions() const { return regions_; }

 private:
  struct Handle {
    LiveAllocation allocation;
    bool released = false;
    uint32_t mappings = 0;
  };
  struct Mapping {
    uint64_t size;
    uint64_t handle;
  };
  void allocate(const Event& e);
  void free(const Event& e);
  void count(const LiveAllocation& a, uint64_t addr, int64_t sign);  // ADDR: its address or handle
  void retire_handle_if_unused(std::unordered_map<uint64_t, Handle>::iterator it);
  void allocate_region(const Event& e);
  void free_region(std::map<uint64_t, LiveAllocation>::iterator it);
  int32_t heap_device(uint64_t base) const;
  void unmatched();
  void drop_heap(const Event& e);  // heap unregister or reset
  // An expandable segment's mapping: extends the heap it touches (both, when it fills the gap
  // between two), or starts one; an unmapping shrinks or splits the heap it lies in.
  void map_heap(const Event& e);
  void unmap_heap(const Event& e);
  int32_t event_device(const Event& e, uint64_t addr) const { return e.device >= 0 ? e.device : heap_device(addr); }
  void count_allocated(const LiveAllocation& a, uint64_t addr, int64_t sign);

  ReplayStep step_;
  // Device, managed and pinned host allocations, graph memory and IPC imports: the map holds an
  // index into the pool, so that it stays small enough for the CPU's caches.
  AddressMap<uint32_t> addresses_;
  std::vector<LiveAllocation> pool_;
  std::vector<uint32_t> free_entries_;
  std::unordered_map<uint64_t, Handle> handles_;  // VMM physical, imported and multicast, by handle
  std::map<uint64_t, Mapping> mappings_;          // VMM mappings, by address
  std::unordered_map<uint64_t, LiveAllocation> reservations_;
  std::map<uint64_t, Heap> heaps_;              // by base address
  std::map<uint64_t, LiveAllocation> regions_;  // the allocated layer, by address
  BytesByDevice device_bytes_;
  BytesByDevice allocated_bytes_;
  uint64_t reserved_bytes_ = 0;
  uint64_t allocated_total_ = 0;
  uint64_t pinned_host_bytes_ = 0;
  uint64_t unmatched_frees_ = 0;
};

}  // namespace memtrace
