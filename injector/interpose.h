// What every interposer shares: finding the real function, the reentrancy guard, and the
// bookkeeping of one recorded call.
#pragma once

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <type_traits>

#include "backend.h"
#include "memtrace/format/api.h"
#include "real_function.h"
#include "session.h"

#define MEMTRACE_EXPORT extern "C" __attribute__((visibility("default")))
#define MEMTRACE_CALLER reinterpret_cast<uint64_t>(__builtin_return_address(0))

namespace memtrace::inject {

// Depth of memtrace calls on this thread. A CUDA call made inside a recorded one (the runtime
// serving cudaMalloc with cuMemAlloc, or memtrace asking for the current device) passes through.
extern thread_local int t_depth __attribute__((tls_model("initial-exec")));

// One call into an interposed API. Construct before the real call; it records only when it is
// the outermost call on its thread and the session is active.
class Call {
 public:
  Call(Api api, uint64_t caller) : caller(caller), counted_(true), active_(t_depth++ == 0 && interposer_records()) {
    event.api = api;
    event.kind = api_info(api).kind;
    if (active_) {
      t_interposer_recording = true;
      enter_call(api, caller);
    }
  }
  // A call CUPTI reported (cupti_backend.cpp), which no interposer holds: recorded, with no
  // return address into the program (its stack says where it was made).
  struct FromCupti {};
  Call(Api api, FromCupti) : caller(0), counted_(false), active_(session_active()) {
    event.api = api;
    event.kind = api_info(api).kind;
    event.flags |= kEventFromCupti;
    if (active_) enter_call(api, caller);
  }
  // Whether an interposer records a call: memtrace's interposers are recording, the call is not
  // inside one CUPTI reports, and the session is up. Asked again once the session is up: its
  // start may have handed the calls over to CUPTI (--backend cupti).
  static bool interposer_records() {
    return g_interposers_record.load(std::memory_order_relaxed) && !in_cupti_call() && session_active() &&
           g_interposers_record.load(std::memory_order_relaxed);
  }

  ~Call() {
    if (active_) leave_call();
    if (counted_) --t_depth;
    if (counted_ && active_) t_interposer_recording = false;
  }
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  bool active() const { return active_; }

  // Frees take their place in the order before the real call: once it returns, another thread
  // may be handed the same address.
  void stamp_before() {
    if (active_) {
      seq_ = stamp(event);
      call_ordered(seq_, event.t_ns);
      stamped_ = true;
    }
  }

  // Records the call with its result, and for an allocation (failed ones too) its stack; leaves
  // errno as the real call left it.
  void finish(int result) {
    if (!active_) return;
    int saved_errno = errno;
    event.result = result;
    if (event.op() == Op::kAlloc) {
      // Out of memory: what the device had left, for the snapshot. It may be gone a moment later.
      if (result == kOutOfMemoryResult) query_device_memory(origin(), event.device_free, event.device_total);
      StackCapture stack;
      capture_stack(stack_options(), caller, stack);
      seq_ = stamp(event);  // after the real call returned the address, and after the stack walk
      call_ordered(seq_, event.t_ns);
      publish(event, seq_, &stack);
      if (result == 0 && (event.kind == MemKind::kDevice || event.kind == MemKind::kVmmMapping))
        note_reserved(event.addr, event.size);
      if (result == 0 &&
          (event.kind == MemKind::kDevice || event.kind == MemKind::kManaged || event.kind == MemKind::kVmmPhysical))
        sample_device_memory(origin(), event.device, event.size, event.t_ns);
    } else {
      if (!stamped_) {
        seq_ = stamp(event);
        call_ordered(seq_, event.t_ns);
      }
      publish(event, seq_, nullptr);
    }
    if (result == 0) describe_devices_once(origin());
    errno = saved_errno;
  }

  // Where memtrace's questions about the call go (the current device, the device of a pointer):
  // the copy of the CUDA library that served it, once known, else the caller's.
  uint64_t origin() const { return served_by ? served_by : caller; }

  Event event;             // what the call did, filled in around the real call
  const uint64_t caller;   // the return address into the program
  uint64_t served_by = 0;  // the real function the call reached

 private:
  bool counted_;  // in t_depth
  bool active_;
  bool stamped_ = false;
  uint64_t seq_ = 0;
};

// A call that uses CUDA without allocating (cuInit, asking how many devices there are): nothing
// is recorded, but the first one connects to memtrace, so that a program that only asked, or
// stopped before it allocated, still leaves a trace with its ending. Only such pure queries are
// interposed: a call that changes a runtime's state (cudaSetDevice) reached through a tail call
// would be sent to the runtime of the caller's caller, which may be another copy.
inline void note_cuda_use() {
  if (t_depth++ == 0) session_active();
  --t_depth;
}

// Calls the real function CALLER would have reached, or answers MISSING when there is none.
template <auto kMissing, typename Fn, typename... Args>
auto call_real(RealFunction<Fn>& real, uint64_t caller, Args... args) {
  Fn fn = real.get(caller);
  return fn ? fn(args...) : kMissing;
}
// The same for a recorded call, which remembers the function that served it.
template <auto kMissing, typename Fn, typename... Args>
auto call_real(Call& call, RealFunction<Fn>& real, Args... args) {
  Fn fn = real.get(call.caller);
  call.served_by = reinterpret_cast<uint64_t>(fn);
  return fn ? fn(args...) : kMissing;
}

// The libraries whose entry points memtrace interposes: libcuda.so.1, libcudart.so.13, a wheel's
// libcudart-<hash>.so.12, and libcupti (whose cuptiSubscribe memtrace must see first) (dlsym.cpp).
bool from_cuda_library(const void* fn);
// memtrace's own interposer named NAME (a versioned symbol: cuMemAlloc_v2), read from its dynamic
// symbols (a dlsym on its own handle that failed would leave an error for the program's next
// dlerror); null when it has none.
void* own_interposer(const char* name);
// What a lookup that found FN, a CUDA library's function named NAME, hands to CALLER: memtrace's
// interposer of that name, with FN pinned for CALLER's module (its calls of the interposer reach
// FN); FN itself when memtrace interposes none, or FN is no CUDA library's (dlsym.cpp).
void* interposer_for_found(const char* name, void* fn, uint64_t caller);

// What memtrace asks CUDA about a call (device_query.cpp), each time of the CUDA library the
// calling module uses. The current device of the runtime, and of the driver's current context;
// -1 if unknown.
int runtime_device(uint64_t caller);
int driver_device(uint64_t caller);
// The device ADDR lies on; FALLBACK when the driver cannot say.
int pointer_device(uint64_t caller, uint64_t addr, int fallback);
// The device a physical memory handle's memory is on (cuMemGetAllocationPropertiesFromHandle); -1 if unknown.
int handle_device(uint64_t caller, uint64_t handle);
// The size of the allocation at ADDR as the driver knows it (cuMemGetAddressRange); 0 if it cannot say.
uint64_t allocation_size(uint64_t caller, uint64_t addr);
// Whether STREAM is being captured into a CUDA graph. Stream 0 is the legacy stream (never
// captured) unless PER_THREAD (the _ptsz entry points), where it is the per-thread stream.
bool stream_capturing(uint64_t caller, const void* stream, bool per_thread);

// How a call is ordered: at once, or in a stream (where it may be captured into a graph).
enum class Ordering { kImmediate, kStream, kPerThreadStream };

// A stream-ordered call made while its stream is being captured only adds a node to a CUDA
// graph: the memory is the graph's, obtained at each launch. Such calls are tagged, and what they
// allocate is graph memory.
inline void tag_if_captured(Call& call, Ordering ordering, bool ok, const void* stream) {
  if (ok && ordering != Ordering::kImmediate &&
      stream_capturing(call.origin(), stream, ordering == Ordering::kPerThreadStream)) {
    call.event.flags |= kEventCaptured;
    if (call.event.op() == Op::kAlloc) call.event.kind = MemKind::kGraphMemory;
  }
}

// An address as the runtime (a pointer) or the driver (a CUdeviceptr) gives it.
template <typename Address>
uint64_t as_address(Address address) {
  if constexpr (std::is_pointer_v<Address>)
    return reinterpret_cast<uint64_t>(address);
  else
    return static_cast<uint64_t>(address);
}

// What a call handed back through its out-parameter once it succeeded; 0 when it failed or had
// nowhere to put it.
template <typename Result, typename Out>
uint64_t address_of(Result result, const Out* out) {
  return result != 0 || !out ? 0 : as_address(*out);
}

// Records a call that created something, once the real call has returned it. DEVICE says which
// device it is on; it is asked only when the call is recorded, and may call CUDA (errno is kept).
template <typename Result, typename Device>
Result record_after(Call& call, Result result, uint64_t addr, uint64_t size, Device&& device,
                    const void* stream = nullptr, Ordering ordering = Ordering::kImmediate) {
  if (call.active()) {
    int saved_errno = errno;
    call.event.addr = addr;
    call.event.size = size;
    call.event.stream = reinterpret_cast<uint64_t>(stream);
    tag_if_captured(call, ordering, result == 0, stream);
    call.event.device = device();
    errno = saved_errno;
    call.finish(static_cast<int>(result));
  }
  return result;
}

// The device a memory location (CUmemLocation, cudaMemLocation) names; -1 for the host.
template <typename Location>
int location_device(const Location& at) {
  constexpr int kLocationTypeDevice = 1;  // CU_MEM_LOCATION_TYPE_DEVICE, cudaMemLocationTypeDevice
  return static_cast<int>(at.type) == kLocationTypeDevice ? at.id : -1;
}

// What a node made through the generic node API (cudaGraphAddNode, cuGraphAddNode) is recorded as,
// by its parameters' type (cudaGraphNodeParams and CUgraphNodeParams share its values): ALLOC for an
// allocation node, FREE for a free node, kUnknown for any other (it holds no memory).
template <typename NodeParams>
Api graph_node_api(const NodeParams* params, Api alloc, Api free) {
  const int type = params ? static_cast<int>(params->type) : -1;
  constexpr int kMemAlloc = 10, kMemFree = 11;  // CU_GRAPH_NODE_TYPE_MEM_ALLOC, _MEM_FREE
  return type == kMemAlloc ? alloc : type == kMemFree ? free : Api::kUnknown;
}

// A CUDA graph's memory node, once the real call has given its allocation an address: GRAPH in
// handle, on DEVICE (the one its pool's properties name).
template <typename Result>
Result record_graph_node(Call& call, Result result, uint64_t addr, uint64_t size, const void* graph, int device) {
  if (call.active()) call.event.handle = reinterpret_cast<uint64_t>(graph);
  return record_after(call, result, result == 0 ? addr : 0, size, [device] { return device; });
}

// Another process's memory opened at ADDR: its size and device, as the driver knows them.
template <typename Result>
Result record_opened(Call& call, Result result, uint64_t addr) {
  const uint64_t size = call.active() && addr ? allocation_size(call.origin(), addr) : 0;
  return record_after(call, result, addr, size, [&call, addr] { return pointer_device(call.origin(), addr, -1); });
}

// Which device an allocation is on: the current one (cudaMalloc, cuMemAlloc) or, for
// stream-ordered ones, the one the returned pointer lies on (the stream's or the pool's). A
// captured allocation has no memory yet: its stream's current device stands for it.
inline auto current_runtime_device(const Call& call) {
  return [&call] { return runtime_device(call.origin()); };
}
inline auto current_driver_device(const Call& call) {
  return [&call] { return driver_device(call.origin()); };
}
inline auto device_of_pointer(const Call& call, int (*current)(uint64_t)) {
  return [&call, current] {
    int device = current(call.origin());
    if (call.event.addr && !call.event.captured()) device = pointer_device(call.origin(), call.event.addr, device);
    return device;
  };
}
inline int no_device() { return -1; }

// A call that releases something: ordered before the real call (once it returns, another thread
// may be handed the same address), recorded with its result after.
template <auto kMissing, typename Fn, typename... Args>
auto free_call(Api api, uint64_t caller, RealFunction<Fn>& real, uint64_t addr, uint64_t size, const void* stream,
               Ordering ordering, Args... args) {
  Call call(api, caller);
  call.event.addr = addr;
  call.event.size = size;
  call.event.stream = reinterpret_cast<uint64_t>(stream);
  call.stamp_before();
  auto result = call_real<kMissing>(call, real, args...);
  if (call.active()) {
    int saved_errno = errno;
    tag_if_captured(call, ordering, result == 0, stream);
    errno = saved_errno;
  }
  call.finish(static_cast<int>(result));
  return result;
}

}  // namespace memtrace::inject
