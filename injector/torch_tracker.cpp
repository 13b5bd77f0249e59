// PyTorch's caching allocator, heard from inside: the allocated layer (blocks handed to tensors,
// the segments they are carved from, the out-of-memory it raises), every event as it happens,
// with the allocating thread's stack, through the allocator's trace tracker
// (c10::cuda::CUDACachingAllocator::attachAllocatorTraceTracker, PyTorch 2.2 and later).
//
// memtrace links nothing of PyTorch's, so the call is made through the ABI. attach is a virtual
// method of CUDAAllocator reached through an inline function, and libc10_cuda hides its own
// classes; its slot in the vtable is found where it is exported: CUDAPluggableAllocator, a
// public subclass in libtorch_cuda, overrides it, so the slot that holds that override in its
// vtable is the method's slot in every CUDAAllocator. The tracker is a std::function (its layout
// is libstdc++'s on both sides) of a TraceEntry, read by the offsets it has had since 2.2.
//
// Nothing is taken on trust. The allocator must be PyTorch's native one (not a pluggable one,
// whose attach throws) and its method must lie in libc10_cuda. Then the first event must be the
// segment the allocator just reserved, held against the cudaMalloc or cuMemMap memtrace saw this
// thread make: until it is, nothing is recorded; if it is not, the tracker stays silent for good
// (it cannot be detached) and the trace says why. Trackers run under the allocator's lock and
// must never take the GIL: memtrace's stack capture needs neither.
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <string>

#include "elf_symbols.h"
#include "interpose.h"
#include "stack_capture.h"

namespace memtrace::inject {

namespace {

struct TraceEntryView;  // PyTorch's TraceEntry, read by offsets
using Tracker = std::function<void(const TraceEntryView&)>;
using Attach = void (*)(void* allocator, Tracker tracker);

// TraceEntry since 2.2: Action action_ (an int), DeviceIndex device_ (int8), size_t addr_,
// shared_ptr context_, stream_, size_t size_, then times and strings memtrace does not read.
constexpr size_t kActionAt = 0, kDeviceAt = 4, kAddrAt = 8, kStreamAt = 32, kSizeAt = 40;
enum Action : int32_t {
  kAlloc,
  kFreeRequested,
  kFreeCompleted,
  kSegmentAlloc,
  kSegmentFree,
  kSegmentMap,
  kSegmentUnmap,
  kSnapshot,
  kOom,
};

constexpr const char* kAllocatorSymbol = "_ZN3c104cuda20CUDACachingAllocator9allocatorE";
constexpr const char* kPluggableVtable = "_ZTVN5torch4cuda22CUDAPluggableAllocator22CUDAPluggableAllocatorE";
constexpr const char* kPluggableAttachPrefix =
    "_ZN5torch4cuda22CUDAPluggableAllocator22CUDAPluggableAllocator27attachAllocatorTraceTrackerE";

enum State : int { kNotAttached, kUnconfirmed, kConfirmed, kSilent };
std::atomic<int> g_state{kNotAttached};
std::atomic<uint64_t> g_before_confirmed{0};  // events that came before the first segment
std::atomic<uint64_t> g_unreadable{0};
std::string* g_version = new std::string();

// The reserved memory this thread obtained last: what PyTorch's next segment must be.
struct LastReserved {
  uint64_t addr = 0, size = 0;
};
thread_local LastReserved t_last_reserved __attribute__((tls_model("initial-exec")));

template <typename T>
T read_at(const TraceEntryView& entry, size_t offset) {
  T value;
  std::memcpy(&value, reinterpret_cast<const char*>(&entry) + offset, sizeof value);
  return value;
}

void say(const std::string& text) { publish_notice(text); }

void record(Api api, int device, uint64_t addr, uint64_t size, uint64_t stream, uint64_t device_free = 0) {
  if (t_depth != 0) return;  // an allocation memtrace itself made
  ++t_depth;
  if (session_active()) {
    Event e;
    e.api = api;
    e.kind = api_info(api).kind;
    e.layer = api_info(api).layer;
    e.device = device;
    e.addr = addr;
    e.size = size;
    e.stream = stream;
    const uint64_t caller = MEMTRACE_CALLER;
    if (api == Api::kTorchOom) {
      e.result = kOutOfMemoryResult;
      uint64_t free_now = 0;
      query_device_memory(caller, free_now, e.device_total);
      e.device_free = device_free;  // what PyTorch saw when it gave up
    }
    if (e.op() == Op::kAlloc) {
      StackCapture stack;
      capture_stack(stack_options(), caller, stack);
      uint64_t seq = stamp(e);
      publish(e, seq, &stack);
    } else {
      publish(e, stamp(e), nullptr);
    }
  }
  --t_depth;
}

// The first segment PyTorch reports is the one this thread just reserved: cudaMalloc's result,
// or the last page cuMemMap mapped into an expandable segment's range.
bool matches_last_reserved(uint64_t addr, uint64_t size) {
  const LastReserved& r = t_last_reserved;
  return r.size && r.addr >= addr && r.addr + r.size == addr + size;
}

void on_trace_entry(const TraceEntryView& entry) {
  int state = g_state.load(std::memory_order_acquire);
  if (state == kSilent || state == kNotAttached) return;
  auto action = read_at<int32_t>(entry, kActionAt);
  int device = read_at<int8_t>(entry, kDeviceAt);
  auto addr = read_at<uint64_t>(entry, kAddrAt);
  auto stream = read_at<uint64_t>(entry, kStreamAt);
  auto size = read_at<uint64_t>(entry, kSizeAt);
  if (action < kAlloc || action > kOom || device < 0) {
    if (g_unreadable.fetch_add(1, std::memory_order_relaxed) == 0)
      say("PyTorch " + *g_version +
          ": some allocator events could not be read (an action or device memtrace does not know): they are "
          "missing from the allocated layer");
    return;
  }
  if (state == kUnconfirmed) {
    if (action != kSegmentAlloc && action != kSegmentMap) {
      g_before_confirmed.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    int expected = kUnconfirmed;
    bool ok = matches_last_reserved(addr, size);
    if (!g_state.compare_exchange_strong(expected, ok ? kConfirmed : kSilent) && expected == kSilent) return;
    if (!ok) {
      say("PyTorch " + *g_version +
          ": its allocator's first segment did not match the memory memtrace saw it reserve, so memtrace does not "
          "read this version's allocator events right: the allocated layer (tensors) is not recorded, the reserved "
          "layer is");
      return;
    }
    if (uint64_t early = g_before_confirmed.load(std::memory_order_relaxed))
      say(std::to_string(early) +
          " allocator events came before PyTorch's first segment, when memtrace could not yet check it reads them "
          "right: they are missing from the allocated layer");
  }
  switch (action) {
    case kAlloc: record(Api::kTorchAlloc, device, addr, size, stream); break;
    case kFreeRequested: record(Api::kTorchFree, device, addr, size, stream); break;
    case kFreeCompleted: record(Api::kTorchFreeCompleted, device, addr, size, stream); break;
    case kSegmentAlloc: record(Api::kTorchSegmentAlloc, device, addr, size, stream); break;
    case kSegmentFree: record(Api::kTorchSegmentFree, device, addr, size, stream); break;
    case kSegmentMap: record(Api::kTorchSegmentMap, device, addr, size, stream); break;
    case kSegmentUnmap: record(Api::kTorchSegmentUnmap, device, addr, size, stream); break;
    case kOom: record(Api::kTorchOom, device, 0, size, stream, /*device_free=*/addr); break;
    default: break;  // a snapshot taken
  }
}

// Where attach lives in CUDAAllocator's vtable, found from CUDAPluggableAllocator's; -1 if not.
int attach_slot(const LoadedModule& torch_cuda, std::string& why) {
  uint64_t vtable_bytes = 0;
  uint64_t vtable = find_dynamic_symbol(torch_cuda, kPluggableVtable, &vtable_bytes);
  int overloads = 0;
  uint64_t method = find_dynamic_symbol_prefix(torch_cuda, kPluggableAttachPrefix, overloads);
  if (!vtable || !method || overloads != 1 || vtable_bytes <= 16) {
    why = "libtorch_cuda exports no CUDAPluggableAllocator::attachAllocatorTraceTracker (it came with PyTorch 2.2)";
    return -1;
  }
  // An Itanium vtable: the offset to the top and the type info, then the functions, as many as
  // the symbol's size says.
  const auto* slots = reinterpret_cast<const uint64_t*>(vtable + 16);
  size_t count = (vtable_bytes - 16) / sizeof(uint64_t);
  int found = -1;
  for (size_t i = 0; i < count; ++i) {
    if (slots[i] != method) continue;
    if (found >= 0) {
      why = "attachAllocatorTraceTracker holds two slots of CUDAPluggableAllocator's vtable";
      return -1;
    }
    found = static_cast<int>(i);
  }
  if (found < 0) why = "attachAllocatorTraceTracker is in no slot of CUDAPluggableAllocator's vtable";
  return found;
}

int attach(std::string& why) {
  LoadedModule c10_cuda = find_loaded_module("libc10_cuda.so");
  LoadedModule torch_cuda = find_loaded_module("libtorch_cuda.so");
  if (!c10_cuda.found() || !torch_cuda.found()) {
    why = "libc10_cuda and libtorch_cuda are not loaded (a CPU-only PyTorch?)";
    return 0;
  }
  auto* allocator_symbol = reinterpret_cast<std::atomic<void*>*>(find_dynamic_symbol(c10_cuda, kAllocatorSymbol));
  void* allocator = allocator_symbol ? allocator_symbol->load() : nullptr;
  if (!allocator) {
    why = "libc10_cuda exports no CUDACachingAllocator::allocator";
    return 0;
  }
  int slot = attach_slot(torch_cuda, why);
  if (slot < 0) return 0;
  const auto* vptr = *static_cast<const uint64_t* const*>(allocator);
  if (reinterpret_cast<uint64_t>(vptr) == find_dynamic_symbol(torch_cuda, kPluggableVtable) + 16) {
    why = "the program replaced PyTorch's allocator (CUDAPluggableAllocator), which has no trace tracker";
    return 0;
  }
  uint64_t method = vptr[slot];
  if (method < c10_cuda.start || method >= c10_cuda.end) {
    why =
        "the CUDA allocator is not PyTorch's native caching allocator (its attachAllocatorTraceTracker is not "
        "in libc10_cuda)";
    return 0;
  }
  g_state.store(kUnconfirmed, std::memory_order_release);
  try {
    reinterpret_cast<Attach>(method)(allocator, Tracker(&on_trace_entry));
  } catch (const std::exception& e) {
    g_state.store(kSilent, std::memory_order_release);
    why = std::string("PyTorch's allocator refused the tracker: ") + e.what();
    return 0;
  } catch (...) {
    g_state.store(kSilent, std::memory_order_release);
    why = "PyTorch's allocator refused the tracker";
    return 0;
  }
  return 1;
}

}  // namespace

void note_reserved(uint64_t addr, uint64_t size) {
  if (g_state.load(std::memory_order_relaxed) == kUnconfirmed) t_last_reserved = {addr, size};
}

}  // namespace memtrace::inject

using namespace memtrace::inject;
using memtrace::Api;

// Called by the Python shim, holding the GIL, once PyTorch initialized CUDA. Returns 1 when the
// tracker is attached; otherwise says why in the trace and returns 0.
MEMTRACE_EXPORT int memtrace_torch_attach(const char* version) {
  if (g_state.load(std::memory_order_acquire) != kNotAttached) return g_state.load() != kSilent;
  *g_version = version ? version : "?";
  if (!session_active()) return 0;  // not traced
  std::string why;
  int attached = attach(why);
  if (!attached)
    publish_notice("PyTorch " + *g_version + ": " + why +
                   "; memtrace records the reserved layer only (cudaMalloc and the driver's allocations)");
  return attached;
}

// Steps, phases and what tensors are, from the Python shim. Recorded only once the process is
// traced (it used CUDA): they mean nothing of memory before.
MEMTRACE_EXPORT void memtrace_mark(const char* name) { record_shim_mark(Api::kShimMark, 0, name ? name : ""); }
MEMTRACE_EXPORT void memtrace_range_push(const char* name) {
  record_shim_mark(Api::kShimRangePush, 0, name ? name : "");
}
MEMTRACE_EXPORT void memtrace_range_pop() { record_shim_mark(Api::kShimRangePop, 0, ""); }
MEMTRACE_EXPORT void memtrace_tag(const uint64_t* addresses, uint64_t count, const char* category) {
  for (uint64_t i = 0; addresses && i < count; ++i)
    if (addresses[i]) record_shim_mark(Api::kTorchCategory, addresses[i], category ? category : "other");
}
