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
#include <pthread.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "elf_symbols.h"
#include "interpose.h"
#include "memtrace/format/torch_action.h"
#include "memtrace/format/torch_pool.h"
#include "stack_capture.h"

namespace memtrace::inject {

namespace {

struct TraceEntryView;  // PyTorch's TraceEntry, read by offsets
using Tracker = std::function<void(const TraceEntryView&)>;
using Attach = void (*)(void* allocator, Tracker tracker);

// TraceEntry since 2.2: Action action_ (an int), DeviceIndex device_ (int8), size_t addr_,
// shared_ptr context_, stream_, size_t size_, then times and strings memtrace does not read.
// Actions numbered as memtrace/format/torch_action.h has them.
constexpr size_t kActionAt = 0, kDeviceAt = 4, kAddrAt = 8, kStreamAt = 32, kSizeAt = 40;
// 2.8 on (PR #150683): MempoolId_t mempool_ (two unsigned long long) after size_, the pool of the
// block or segment the entry is about.
constexpr size_t kMempoolAt = 48;
std::atomic<bool> g_reads_pool{false};

constexpr const char* kAllocatorSymbol = "_ZN3c104cuda20CUDACachingAllocator9allocatorE";
constexpr const char* kPluggableVtable = "_ZTVN5torch4cuda22CUDAPluggableAllocator22CUDAPluggableAllocatorE";
constexpr const char* kPluggableAttachPrefix =
    "_ZN5torch4cuda22CUDAPluggableAllocator22CUDAPluggableAllocator27attachAllocatorTraceTrackerE";

enum State : int { kNotAttached, kUnconfirmed, kConfirmed, kSilent };
std::atomic<int> g_state{kNotAttached};
std::atomic<uint64_t> g_unreadable{0};
std::string* g_version = new std::string();

// The reserved memory this thread obtained last (its serial counts the reservations): what
// PyTorch's next segment must be when PyTorch reserved it in the same allocator call.
struct LastReserved {
  uint64_t addr = 0, size = 0, serial = 0;
};
thread_local LastReserved t_last_reserved __attribute__((tls_model("initial-exec")));
thread_local uint64_t t_serial_seen __attribute__((tls_model("initial-exec"))) = 0;  // at the last event

template <typename T>
T read_at(const TraceEntryView& entry, size_t offset) {
  T value;
  std::memcpy(&value, reinterpret_cast<const char*>(&entry) + offset, sizeof value);
  return value;
}

void say(const std::string& text) { publish_notice(text); }

// The entry's pool, where this release has mempool_: a pair of counters, one of them 0 (a build
// from before PR #150683 that calls itself 2.8 has the time there: then no pool is read again).
uint64_t read_pool(const TraceEntryView& entry) {
  const auto first = read_at<uint64_t>(entry, kMempoolAt), second = read_at<uint64_t>(entry, kMempoolAt + 8);
  constexpr uint64_t kMostPools = 1ull << 32;
  if ((first && second) || first >= kMostPools || second >= kMostPools) {
    if (g_reads_pool.exchange(false, std::memory_order_relaxed))
      say("PyTorch " + *g_version +
          ": its allocator events carry no pool where 2.8's do, so PyTorch's private pools (CUDA graphs', "
          "MemPools') are not told apart");
    return 0;
  }
  return torch_pool_key(first, second);
}

// Events that came before memtrace could check it reads this PyTorch's events right (the first
// segments were another allocator's: a MemPool's own), kept until it can: then published, at the
// time of the check; dropped if it finds it reads them wrong.
struct Early {
  Event event;
  bool has_stack = false;
  StackCapture stack;
};
constexpr size_t kMaxEarly = 256;
std::mutex g_early_mutex;
std::vector<Early>* g_early = new std::vector<Early>();
std::atomic<uint64_t> g_early_dropped{0};
__attribute__((constructor)) void hold_early_across_fork() {
  ::pthread_atfork([] { g_early_mutex.lock(); }, [] { g_early_mutex.unlock(); }, [] { g_early_mutex.unlock(); });
}

void record(Api api, int device, uint64_t addr, uint64_t size, uint64_t stream, uint64_t device_free, bool early,
            uint64_t pool = 0) {
  if (t_depth != 0) return;  // an allocation memtrace itself made
  ++t_depth;
  if (session_active()) {
    Early r;
    Event& e = r.event;
    e.api = api;
    e.kind = api_info(api).kind;
    e.layer = api_info(api).layer;
    e.device = device;
    e.addr = addr;
    e.size = size;
    e.stream = stream;
    e.handle = pool;
    const uint64_t caller = MEMTRACE_CALLER;
    if (api == Api::kTorchOom) {
      e.result = kOutOfMemoryResult;
      uint64_t free_now = 0;
      query_device_memory(caller, free_now, e.device_total);
      e.device_free = device_free;  // what PyTorch saw when it gave up
    }
    if (e.op() == Op::kAlloc) {
      StackOptions options = stack_options();
      options.python_api = false;  // under PyTorch's allocator lock: the GIL-free reading only
      capture_stack(options, caller, r.stack);
      r.has_stack = true;
    }
    if (early) {
      // Published later, perhaps by another thread: what its walk shared with this thread's walk
      // before it says nothing of the publishing thread's kept stack.
      r.stack.walk_serial = 0;
      std::lock_guard lock(g_early_mutex);
      if (g_early->size() < kMaxEarly)
        g_early->push_back(r);
      else
        g_early_dropped.fetch_add(1, std::memory_order_relaxed);
    } else {
      publish(e, stamp(e), r.has_stack ? &r.stack : nullptr);
    }
  }
  --t_depth;
}

void publish_early() {
  std::lock_guard lock(g_early_mutex);
  for (Early& r : *g_early) publish(r.event, stamp(r.event), r.has_stack ? &r.stack : nullptr);
  g_early->clear();
}

void forget_early() {
  std::lock_guard lock(g_early_mutex);
  g_early->clear();
}

// POOL: torch_pool_key of the entry's pool, kept for the segments it was made for.
void record_action(TorchAction action, int device, uint64_t addr, uint64_t size, uint64_t stream, uint64_t pool,
                   bool early) {
  const Api api = torch_action_info(action).api;
  if (action == TorchAction::kOom)
    record(api, device, 0, size, stream, /*device_free=*/addr, early);
  else if (action == TorchAction::kSegmentAlloc || action == TorchAction::kSegmentMap)
    record(api, device, addr, size, stream, 0, early, pool);
  else if (api != Api::kUnknown)  // not a snapshot taken
    record(api, device, addr, size, stream, 0, early);
}

// What a segment PyTorch reports says of memtrace's reading of its events. PyTorch's own segment is
// the memory this thread just reserved in the same allocator call: cudaMalloc's result, or the last
// page cuMemMap mapped into an expandable segment's range. Another allocator's (a MemPool's own:
// vLLM's, torch_memory_saver's) may follow no reservation (it pre-reserved its memory), or lie
// inside a larger one it just made (an arena): those say nothing either way. Only a segment that
// is not the memory just reserved, nor inside it, tells that memtrace reads the events wrong.
enum class SegmentCheck { kMatches, kDiffers, kTellsNothing };
SegmentCheck check_segment(uint64_t addr, uint64_t size) {
  const LastReserved& r = t_last_reserved;
  if (r.serial == t_serial_seen) return SegmentCheck::kTellsNothing;
  if (r.addr >= addr && r.addr + r.size == addr + size) return SegmentCheck::kMatches;
  bool inside = addr >= r.addr && size <= r.size && addr - r.addr <= r.size - size;
  return inside ? SegmentCheck::kTellsNothing : SegmentCheck::kDiffers;
}

// Segments PyTorch's own snapshot listed when memtrace attached (memtrace_existing): a block
// handed out inside one of them is read right as surely as a segment matching a reservation is
// (a steady job reserves no new segment).
std::mutex g_known_segments_mutex;
std::map<uint64_t, uint64_t>* g_known_segments = new std::map<uint64_t, uint64_t>();  // start -> end
__attribute__((constructor)) void hold_known_segments_across_fork() {
  ::pthread_atfork([] { g_known_segments_mutex.lock(); }, [] { g_known_segments_mutex.unlock(); },
                   [] { g_known_segments_mutex.unlock(); });
}

bool inside_known_segment(uint64_t addr, uint64_t size) {
  std::lock_guard lock(g_known_segments_mutex);
  auto it = g_known_segments->upper_bound(addr);
  if (it == g_known_segments->begin()) return false;
  --it;
  return addr >= it->first && size <= it->second - addr;
}

void on_trace_entry(const TraceEntryView& entry) {
  int state = g_state.load(std::memory_order_acquire);
  if (state == kSilent || state == kNotAttached) return;
  std::optional<TorchAction> known = torch_action(read_at<int32_t>(entry, kActionAt));
  int device = read_at<int8_t>(entry, kDeviceAt);
  auto addr = read_at<uint64_t>(entry, kAddrAt);
  auto stream = read_at<uint64_t>(entry, kStreamAt);
  auto size = read_at<uint64_t>(entry, kSizeAt);
  if (!known || device < 0) {
    if (g_unreadable.fetch_add(1, std::memory_order_relaxed) == 0)
      say("PyTorch " + *g_version +
          ": some allocator events could not be read (an action or device memtrace does not know): they are "
          "missing from the allocated layer");
    return;
  }
  const TorchAction action = *known;
  // Only a segment keeps its pool: the tensors' events read no more than before.
  const bool segment = action == TorchAction::kSegmentAlloc || action == TorchAction::kSegmentMap;
  const uint64_t pool = segment && g_reads_pool.load(std::memory_order_relaxed) ? read_pool(entry) : 0;
  if (state == kUnconfirmed) {
    SegmentCheck check = action == TorchAction::kSegmentAlloc || action == TorchAction::kSegmentMap
                             ? check_segment(addr, size)
                             : SegmentCheck::kTellsNothing;
    t_serial_seen = t_last_reserved.serial;
    if (check == SegmentCheck::kTellsNothing && action == TorchAction::kAlloc && inside_known_segment(addr, size))
      check = SegmentCheck::kMatches;
    if (check == SegmentCheck::kTellsNothing) {
      record_action(action, device, addr, size, stream, pool, /*early=*/true);
      return;
    }
    int expected = kUnconfirmed;
    bool ok = check == SegmentCheck::kMatches;
    if (!g_state.compare_exchange_strong(expected, ok ? kConfirmed : kSilent) && expected == kSilent) return;
    if (!ok) {
      forget_early();
      say("PyTorch " + *g_version +
          ": its allocator's first segment did not match the memory memtrace saw it reserve, so memtrace does not "
          "read this version's allocator events right: the allocated layer (tensors) is not recorded, the reserved "
          "layer is");
      return;
    }
    publish_early();
    if (uint64_t dropped = g_early_dropped.load(std::memory_order_relaxed))
      say(std::to_string(dropped) +
          " allocator events came before PyTorch's first segment of its own (cudaMalloc or cuMemMap), more than "
          "memtrace keeps until it can check it reads them right: they are missing from the allocated layer");
  }
  record_action(action, device, addr, size, stream, pool, /*early=*/false);
}

// Where attach lives in CUDAAllocator's vtable, found from CUDAPluggableAllocator's; -1 if not.
int attach_slot(const LoadedModule& torch_cuda, std::string& why) {
  uint64_t vtable_bytes = 0;
  uint64_t vtable = find_dynamic_symbol(torch_cuda, kPluggableVtable, &vtable_bytes);
  int overloads = 0;
  uint64_t method = find_dynamic_symbol_prefix(torch_cuda, kPluggableAttachPrefix, overloads);
  if (!vtable || !method || overloads != 1 || vtable_bytes <= 16) {
    why =
        "libtorch_cuda exports no CUDAPluggableAllocator::attachAllocatorTraceTracker, by which memtrace finds the "
        "tracker (2.1 has no tracker; 2.2 to 2.5 do not export the class)";
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

// The allocator's class, from its RTTI: the mangled name of the type_info the vtable points to
// (Itanium ABI: the word before the first virtual function), read where it lies in a loaded
// module; empty when it does not. Hidden classes keep their type_info and its name.
std::string dynamic_class(const void* object) {
  const auto* vptr = *static_cast<const uint64_t* const*>(object);
  if (!loaded_module_containing(reinterpret_cast<uint64_t>(vptr)).found()) return {};
  const auto* type_info = reinterpret_cast<const uint64_t*>(vptr[-1]);
  if (!type_info || !loaded_module_containing(reinterpret_cast<uint64_t>(type_info)).found()) return {};
  const char* name = reinterpret_cast<const char*>(type_info[1]);  // after type_info's own vptr
  if (!name || !loaded_module_containing(reinterpret_cast<uint64_t>(name)).found()) return {};
  if (*name == '*') ++name;  // a name GCC marks as compared by address
  return std::string(name, strnlen(name, 256));
}

// PyTorch's allocator classes (c10/cuda/CUDACachingAllocator.cpp, CUDAMallocAsyncAllocator.cpp,
// torch/csrc/cuda/CUDAPluggableAllocator.h), by their mangled names. The native one has been
// c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator through 2.x; newer sources
// derive it from a device-generic template, so only its name and c10's namespace are required.
bool is_native_class(std::string_view name) {
  constexpr std::string_view kSuffix = "22NativeCachingAllocatorE";
  return name.rfind("N3c10", 0) == 0 && name.size() > kSuffix.size() &&
         name.substr(name.size() - kSuffix.size()) == kSuffix;
}
constexpr const char* kAsyncClass = "N3c104cuda20CUDACachingAllocator15CudaMallocAsync24CudaMallocAsyncAllocatorE";
constexpr const char* kPluggableClass = "N5torch4cuda22CUDAPluggableAllocator22CUDAPluggableAllocatorE";

// Why the allocator in use has no tracker memtrace can attach to; empty for the native one. Only
// PyTorch's native caching allocator is ever called: the others' attachAllocatorTraceTracker
// throws, and an exception must never cross memtrace's frames.
std::string refusal(const std::string& allocator_class) {
  if (is_native_class(allocator_class)) return {};
  if (allocator_class == kAsyncClass)
    return "PyTorch's cudaMallocAsync backend (PYTORCH_CUDA_ALLOC_CONF backend:cudaMallocAsync) keeps no trace of "
           "its own: every tensor is its own cudaMallocAsync, which the reserved layer records";
  if (allocator_class == kPluggableClass)
    return "the program replaced PyTorch's allocator (CUDAPluggableAllocator), which has no trace tracker";
  if (allocator_class.empty()) return "memtrace cannot tell which class PyTorch's CUDA allocator is";
  return "the CUDA allocator is not PyTorch's native caching allocator (" + allocator_class + ")";
}

// attach's answers, as the Python shim reads them (torch_hooks.py).
constexpr int kAnswerNone = 0, kAnswerAttached = 1, kAnswerUseHistory = 2;

// Attaches memtrace's tracker to PyTorch's native caching allocator. kUseHistory: this PyTorch is
// the native allocator but offers no tracker memtrace can reach (2.1 has none; 2.2 to 2.5 hide
// the class memtrace finds its slot by), so PyTorch's own recorder must stand in.
int attach(std::string& why) {
  LoadedModule c10_cuda = find_loaded_module("libc10_cuda.so");
  LoadedModule torch_cuda = find_loaded_module("libtorch_cuda.so");
  if (!c10_cuda.found() || !torch_cuda.found()) {
    why = "libc10_cuda and libtorch_cuda are not loaded (a CPU-only PyTorch?)";
    return kAnswerNone;
  }
  auto* allocator_symbol = reinterpret_cast<std::atomic<void*>*>(find_dynamic_symbol(c10_cuda, kAllocatorSymbol));
  void* allocator = allocator_symbol ? allocator_symbol->load() : nullptr;
  if (!allocator) {
    why = "libc10_cuda exports no CUDACachingAllocator::allocator";
    return kAnswerNone;
  }
  if (why = refusal(dynamic_class(allocator)); !why.empty()) return kAnswerNone;
  int slot = attach_slot(torch_cuda, why);
  if (slot < 0) return kAnswerUseHistory;
  const auto* vptr = *static_cast<const uint64_t* const*>(allocator);
  uint64_t method = vptr[slot];
  if (method < c10_cuda.start || method >= c10_cuda.end) {
    why = "PyTorch's native allocator's attachAllocatorTraceTracker is not in libc10_cuda";
    return kAnswerNone;
  }
  g_state.store(kUnconfirmed, std::memory_order_release);
  // The native allocator's attach does not throw; should it, the exception is the program's C++
  // runtime's, caught here by memtrace's through the one unwinder both share (libgcc_s: the
  // injector links its C++ runtime statically, never its unwinder).
  try {
    reinterpret_cast<Attach>(method)(allocator, Tracker(&on_trace_entry));
  } catch (const std::exception& e) {
    g_state.store(kSilent, std::memory_order_release);
    why = std::string("PyTorch's allocator refused the tracker: ") + e.what();
    return kAnswerNone;
  } catch (...) {
    g_state.store(kSilent, std::memory_order_release);
    why = "PyTorch's allocator refused the tracker";
    return kAnswerNone;
  }
  return kAnswerAttached;
}

}  // namespace

bool inside_pytorch_allocator(const uint64_t* frames, int count) {
  LoadedModule c10_cuda = find_loaded_module("libc10_cuda.so");
  if (!c10_cuda.found()) return false;
  for (int i = 0; i < count; ++i)
    if (frames[i] >= c10_cuda.start && frames[i] < c10_cuda.end) return true;
  return false;
}

void forget_early_torch_events() {
  forget_early();
  g_early_dropped.store(0, std::memory_order_relaxed);
}

void note_segment_before_recording(uint64_t addr, uint64_t size) {
  std::lock_guard lock(g_known_segments_mutex);
  (*g_known_segments)[addr] = addr + size;
}

void note_reserved(uint64_t addr, uint64_t size) {
  if (g_state.load(std::memory_order_relaxed) == kUnconfirmed)
    t_last_reserved = {addr, size, t_last_reserved.serial + 1};
}

}  // namespace memtrace::inject

using namespace memtrace::inject;
using memtrace::Api;

// What `memtrace whatif` replays the run under, once a session: the release and the allocator's
// settings as the environment has them.
static void record_torch_settings() {
  static std::atomic<uint64_t> recorded_in{0};  // the session that has them
  const uint64_t session = session_number();
  if (!session_active() || recorded_in.exchange(session, std::memory_order_acq_rel) == session) return;
  record_shim_mark(Api::kTorchSetting, 0, "torch=" + *g_version);
  const char* conf = ::getenv("PYTORCH_CUDA_ALLOC_CONF");  // unset: PyTorch's defaults
  record_shim_mark(Api::kTorchSetting, 0, std::string("PYTORCH_CUDA_ALLOC_CONF=") + (conf ? conf : ""));
  if (const char* value = ::getenv("PYTORCH_ALLOC_CONF"))  // the newer name (2.9-era main reads it first)
    record_shim_mark(Api::kTorchSetting, 0, std::string("PYTORCH_ALLOC_CONF=") + value);
}

// Called by the Python shim, holding the GIL, once PyTorch initialized CUDA: 1 when the tracker is
// attached; otherwise says why in the trace, and returns 2 when PyTorch's own recorder can stand
// in, 0 when not.
MEMTRACE_EXPORT int memtrace_torch_attach(const char* version) {
  if (g_state.load(std::memory_order_acquire) != kNotAttached) {  // attached before: a later session's
    record_torch_settings();
    return g_state.load() != kSilent;
  }
  *g_version = version ? version : "?";
  int major = 0, minor = 0;
  g_reads_pool.store(
      std::sscanf(g_version->c_str(), "%d.%d", &major, &minor) == 2 && (major > 2 || (major == 2 && minor >= 8)),
      std::memory_order_relaxed);
  if (!session_active()) return 0;  // not traced
  record_torch_settings();
  std::string why;
  int answer = attach(why);
  if (answer == kAnswerNone)
    publish_notice("PyTorch " + *g_version + ": " + why +
                   "; memtrace records the reserved layer only (cudaMalloc and the driver's allocations)");
  else if (answer == kAnswerUseHistory)
    publish_notice(
        "PyTorch " + *g_version + ": " + why +
        "; the allocated layer comes from PyTorch's own recorder (torch.cuda.memory._record_memory_history), "
        "read at exit and at each out-of-memory and merged into the trace");
  return answer;
}

// Steps, phases and what tensors are, from the Python shim. Recorded only once the process is
// traced (it used CUDA): they mean nothing of memory before.
MEMTRACE_EXPORT void memtrace_mark(const char* name) { record_shim_mark(Api::kShimMark, 0, name ? name : ""); }
MEMTRACE_EXPORT void memtrace_range_push(const char* name) {
  record_shim_mark(Api::kShimRangePush, 0, name ? name : "");
}
MEMTRACE_EXPORT void memtrace_range_pop() { record_shim_mark(Api::kShimRangePop, 0, ""); }
// One sentence for the trace from the shim (what it could not do).
MEMTRACE_EXPORT void memtrace_notice(const char* text) {
  if (text && session_active()) publish_notice(text);
}

// One of PyTorch's own counters (torch.cuda.memory_stats) of DEVICE, as "<when>:<figure>", or
// "reset_peak" where the program reset them.
MEMTRACE_EXPORT void memtrace_torch_counter(int device, const char* name, int64_t value) {
  record_shim_mark(Api::kTorchCounter, 0, name ? name : "", device, static_cast<uint64_t>(value));
}
MEMTRACE_EXPORT void memtrace_tag(const uint64_t* addresses, uint64_t count, const char* category) {
  for (uint64_t i = 0; addresses && i < count; ++i)
    if (addresses[i]) record_shim_mark(Api::kTorchCategory, addresses[i], category ? category : "other");
}
