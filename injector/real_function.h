// The real CUDA function an interposer forwards a call to, chosen per caller. A process can
// hold several copies of a CUDA library: a wheel's vendored `libcudart-<hash>.so.12` loaded
// RTLD_LOCAL beside PyTorch's own runtime, a cu12 package beside a cu13 one. Each caller must
// reach the copy it was linked against (its last-error slot, its current device, its contexts),
// as it would without memtrace, so the answer is looked up in the caller's module's own
// dependency scope first and cached per (function, calling module).
#pragma once

#include <atomic>
#include <cstdint>

namespace memtrace::inject {

enum class Library { kRuntime, kDriver };

// Bumped whenever a module is unloaded (modules.cpp): an address range cached for one module may
// then belong to another.
extern std::atomic<uint64_t> g_modules_unloaded;
// Bumped whenever a lookup is pinned (below): a caller's answer may have changed.
extern std::atomic<uint64_t> g_lookups_pinned;

// What a cached answer is good for: both counts only grow, so their sum changes with either.
inline uint64_t answers_generation() {
  return g_modules_unloaded.load(std::memory_order_acquire) + g_lookups_pinned.load(std::memory_order_acquire);
}

// A lookup the program made itself, through dlsym on a CUDA library's handle: it found FN for
// NAME, and memtrace handed out its interposer instead (dlsym.cpp). Calls to that interposer from
// CALLER's module then reach FN, the copy the program asked for; so do calls from modules that
// neither link NAME nor looked it up themselves (ctypes looks up in _ctypes and calls from libffi).
void pin_real_function(const char* name, uint64_t caller, void* fn);

// The function NAME in the library FN lies in (its own dependency scope); null if none.
void* function_beside(const void* fn, const char* name);
// The CUDA version of the runtime RUNTIME_FUNCTION belongs to, as that copy says
// (cudaRuntimeGetVersion); -1 if it cannot say.
int runtime_version_of(const void* runtime_function);

class RealTable {
 public:
  constexpr RealTable(const char* name, Library library) : name_(name), library_(library) {}

  // The real NAME for a call from return address CALLER; null when no loaded object defines it.
  void* find(uint64_t caller) {
    const uint64_t generation = answers_generation();
    for (Slot& slot : slots_)
      if (void* fn = slot.lookup(caller, generation)) return fn;
    return resolve(caller, generation);
  }

 private:
  // One calling module's answer. Written under a sequence count (odd while being written), so
  // readers never take a function from one module with the range of another.
  struct Slot {
    std::atomic<uint64_t> sequence{0};
    std::atomic<uint64_t> start{0}, end{0}, generation{0};
    std::atomic<void*> fn{nullptr};
    void* lookup(uint64_t caller, uint64_t current) const {
      uint64_t before = sequence.load(std::memory_order_acquire);
      if (before == 0 || (before & 1)) return nullptr;
      uint64_t s = start.load(std::memory_order_relaxed), e = end.load(std::memory_order_relaxed);
      uint64_t g = generation.load(std::memory_order_relaxed);
      void* f = fn.load(std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_acquire);
      if (sequence.load(std::memory_order_relaxed) != before) return nullptr;
      return g == current && caller >= s && caller < e ? f : nullptr;
    }
  };
  static constexpr int kSlots = 8;

  void* resolve(uint64_t caller, uint64_t generation);
  void remember(uint64_t start, uint64_t end, uint64_t generation, void* fn);

  const char* name_;
  Library library_;
  Slot slots_[kSlots];
  std::atomic<uint32_t> next_slot_{0};
};

template <typename Fn>
class RealFunction {
 public:
  constexpr RealFunction(const char* name, Library library) : table_(name, library) {}
  Fn get(uint64_t caller) { return reinterpret_cast<Fn>(table_.find(caller)); }

 private:
  RealTable table_;
};

}  // namespace memtrace::inject
