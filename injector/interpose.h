// What every interposer shares: finding the real function, the reentrancy guard, and the
// bookkeeping of one recorded call.
#pragma once

#include <atomic>
#include <cerrno>
#include <cstdint>

#include "memtrace/format/api.h"
#include "session.h"

#define MEMTRACE_EXPORT extern "C" __attribute__((visibility("default")))
#define MEMTRACE_CALLER reinterpret_cast<uint64_t>(__builtin_return_address(0))

namespace memtrace::inject {

enum class Library { kRuntime, kDriver };

// The next definition of NAME after ours: first in the global scope (RTLD_NEXT), then in a CUDA
// library that was loaded privately (RTLD_LOCAL, as Python extensions load theirs).
void* resolve_real(const char* name, Library library);

template <typename Fn>
class RealFunction {
 public:
  RealFunction(const char* name, Library library) : name_(name), library_(library) {}
  Fn get() {
    Fn fn = fn_.load(std::memory_order_acquire);
    if (!fn) {
      fn = reinterpret_cast<Fn>(resolve_real(name_, library_));
      fn_.store(fn, std::memory_order_release);
    }
    return fn;
  }

 private:
  const char* name_;
  Library library_;
  std::atomic<Fn> fn_{nullptr};
};

// Depth of memtrace calls on this thread. A CUDA call made inside a recorded one (the runtime
// serving cudaMalloc with cuMemAlloc, or memtrace asking for the current device) passes through.
extern thread_local int t_depth __attribute__((tls_model("initial-exec")));

// One call into an interposed API. Construct before the real call; it records only when it is
// the outermost call on its thread and the session is active.
class Call {
 public:
  Call(Api api, uint64_t caller) : active_(t_depth++ == 0 && session_active()) {
    record.api = api;
    record.kind = api_info(api).kind;
    record.caller = caller;
    if (active_) publish_started(api, caller);
  }
  ~Call() { --t_depth; }
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  bool active() const { return active_; }

  // Frees take their place in the order before the real call: once it returns, another thread
  // may be handed the same address.
  void stamp_before() {
    if (active_) {
      stamp(record);
      stamped_ = true;
    }
  }

  // Records the call with its result, and for an allocation (failed ones too) its stack; leaves
  // errno as the real call left it.
  void finish(int result) {
    if (!active_) return;
    int saved_errno = errno;
    record.result = result;
    if (api_info(record.api).op == Op::kAlloc) {
      // Out of memory: what the device had left, for the snapshot. It may be gone a moment later.
      if (result == kOutOfMemoryResult) query_device_memory(record.device_free, record.device_total);
      StackCapture stack;
      capture_stack(stack_options(), record.caller, stack);
      stamp(record);  // after the real call returned the address, and after the stack walk
      publish(record, &stack);
    } else {
      if (!stamped_) stamp(record);
      publish(record, nullptr);
    }
    if (result == 0) describe_devices_once();
    errno = saved_errno;
  }

  CallRecord record;

 private:
  bool active_;
  bool stamped_ = false;
};

// Calls the real function, or answers MISSING when there is none to call.
template <auto kMissing, typename Fn, typename... Args>
auto call_real(RealFunction<Fn>& real, Args... args) {
  Fn fn = real.get();
  return fn ? fn(args...) : kMissing;
}

// Records a call that created something, once the real call has returned it.
template <typename Result>
Result record_after(Call& call, Result result, uint64_t addr, uint64_t size, int device, const void* stream = nullptr) {
  if (call.active()) {
    call.record.addr = addr;
    call.record.size = size;
    call.record.device = device;
    call.record.stream = reinterpret_cast<uint64_t>(stream);
    call.finish(static_cast<int>(result));
  }
  return result;
}

// A call that releases something: ordered before the real call (once it returns, another thread
// may be handed the same address), recorded with its result after.
template <auto kMissing, typename Fn, typename... Args>
auto free_call(Api api, uint64_t caller, RealFunction<Fn>& real, uint64_t addr, uint64_t size, const void* stream,
               Args... args) {
  Call call(api, caller);
  call.record.addr = addr;
  call.record.size = size;
  call.record.stream = reinterpret_cast<uint64_t>(stream);
  call.stamp_before();
  auto result = call_real<kMissing>(real, args...);
  call.finish(static_cast<int>(result));
  return result;
}

// The current device of the runtime, and of the driver's current context; -1 if unknown.
int runtime_device();
int driver_device();

}  // namespace memtrace::inject
