#include <dlfcn.h>
#include <link.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "interpose.h"
#include "stack_capture.h"

namespace memtrace::inject {

thread_local int t_depth __attribute__((tls_model("initial-exec"))) = 0;
std::atomic<uint64_t> g_modules_unloaded{0};
std::atomic<uint64_t> g_lookups_pinned{0};

namespace {

// The module an address lies in: the span of its loadable segments, and the name the loader
// knows it by (empty for the main program).
struct Module {
  bool found = false;
  bool main_program = false;
  uint64_t start = 0, end = 0;
  std::string name;
};

Module module_of(uint64_t address) {
  struct Search {
    uint64_t address;
    bool first = true;
    Module module;
  } search{address, true, {}};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* s = static_cast<Search*>(data);
        bool first = s->first;
        s->first = false;
        uint64_t start = UINT64_MAX, end = 0;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_LOAD) continue;
          start = std::min<uint64_t>(start, info->dlpi_addr + ph.p_vaddr);
          end = std::max<uint64_t>(end, info->dlpi_addr + ph.p_vaddr + ph.p_memsz);
        }
        if (s->address < start || s->address >= end) return 0;
        s->module = Module{true, first, start, end, info->dlpi_name ? info->dlpi_name : ""};
        return 1;
      },
      &search);
  return search.module;
}

using Dlclose = int (*)(void*);
Dlclose real_dlclose() {
  static auto fn = reinterpret_cast<Dlclose>(::dlsym(RTLD_NEXT, "dlclose"));
  return fn;
}

// NAME as the library LIBRARY_NAME and what it was linked against see it: dlsym on a handle
// searches that object's own dependency tree, where the global scope (and so our interposers)
// is not. The handle only counts a reference up and down: nothing is loaded or unloaded.
void* lookup_in_scope_of(const std::string& library_name, const char* name, bool& opened) {
  void* handle = ::dlopen(library_name.c_str(), RTLD_LAZY | RTLD_NOLOAD);
  opened = handle != nullptr;
  if (!handle) return nullptr;
  void* fn = ::dlsym(handle, name);
  if (Dlclose close = real_dlclose()) close(handle);  // not ours: it would count as an unload
  return fn && !in_injector(reinterpret_cast<uint64_t>(fn)) ? fn : nullptr;
}

// Any loaded object's definition: the last resort before answering "missing".
void* lookup_anywhere(const char* name) {
  std::vector<std::string> names;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        if (info->dlpi_name && *info->dlpi_name)
          static_cast<std::vector<std::string>*>(data)->push_back(info->dlpi_name);
        return 0;
      },
      &names);
  for (const std::string& library_name : names) {  // outside dl_iterate_phdr: dlopen takes the loader's lock
    bool opened;
    if (void* fn = lookup_in_scope_of(library_name, name, opened)) return fn;
  }
  return nullptr;
}

// The pinned lookups, append-only: a slot is claimed by the count and read once marked ready, so
// no lock is held (a fork while one is held would leave the child unable to resolve anything).
struct Pin {
  std::atomic<bool> ready{false};
  char name[64];
  uint64_t caller_start, caller_end;    // the module that looked NAME up
  uint64_t library_start, library_end;  // the module FN lies in, to notice it unloaded
  char library[256];                    // its path, as the loader knows it
  void* fn;
};
// Each runtime pins a few dozen lookups (NVIDIA's asks for every driver function at its start,
// and a process may hold several runtimes: PyTorch's, NCCL's, cuFFT's...).
constexpr int kPins = 512;
Pin g_pins[kPins];
std::atomic<int> g_pin_count{0};

bool still_loaded(const Pin& pin) {
  Module library = module_of(reinterpret_cast<uint64_t>(pin.fn));
  return library.found && library.start == pin.library_start && library.end == pin.library_end;
}

// Calls FN(pin) for each pin whose library is still loaded, newest first, until FN returns true.
template <typename Fn>
const Pin* find_pin(Fn&& fn) {
  for (int i = std::min(g_pin_count.load(std::memory_order_acquire), kPins) - 1; i >= 0; --i) {
    const Pin& pin = g_pins[i];
    if (pin.ready.load(std::memory_order_acquire) && fn(pin) && still_loaded(pin)) return &pin;
  }
  return nullptr;
}

bool made_from(const Pin& pin, const Module& caller) {
  return pin.caller_start == caller.start && pin.caller_end == caller.end;
}

// The function CALLER's module looked up as NAME itself.
void* pinned_by(const char* name, const Module& caller) {
  const Pin* pin = find_pin([&](const Pin& p) { return made_from(p, caller) && std::strcmp(p.name, name) == 0; });
  return pin ? pin->fn : nullptr;
}

// NAME in the library CALLER's module last looked a function up in: memtrace asking which device
// is current must ask the copy of the runtime the program allocates with.
void* in_library_pinned_by(const char* name, const Module& caller) {
  const Pin* pin = find_pin([&](const Pin& p) { return made_from(p, caller); });
  bool opened;
  return pin ? lookup_in_scope_of(pin->library, name, opened) : nullptr;
}

// The newest function any module looked up as NAME.
void* pinned_by_anyone(const char* name) {
  const Pin* pin = find_pin([&](const Pin& p) { return std::strcmp(p.name, name) == 0; });
  return pin ? pin->fn : nullptr;
}

}  // namespace

void* function_beside(const void* fn, const char* name) {
  Module library = module_of(reinterpret_cast<uint64_t>(fn));
  bool opened;
  return library.found && !library.name.empty() ? lookup_in_scope_of(library.name, name, opened) : nullptr;
}

int runtime_version_of(const void* runtime_function) {
  using GetVersion = int (*)(int*);  // cudaRuntimeGetVersion
  auto get = runtime_function ? reinterpret_cast<GetVersion>(function_beside(runtime_function, "cudaRuntimeGetVersion"))
                              : nullptr;
  int version = -1;
  return get && get(&version) == 0 ? version : -1;
}

void pin_real_function(const char* name, uint64_t caller, void* fn) {
  if (!name || !fn || std::strlen(name) >= sizeof(Pin::name)) return;
  Module from = module_of(caller), library = module_of(reinterpret_cast<uint64_t>(fn));
  if (!from.found || !library.found || library.name.size() >= sizeof(Pin::library)) return;
  if (find_pin([&](const Pin& p) { return made_from(p, from) && std::strcmp(p.name, name) == 0 && p.fn == fn; }))
    return;  // looked up again: nothing changes
  int index = g_pin_count.fetch_add(1, std::memory_order_acq_rel);
  if (index >= kPins) return;  // full: such calls find their function as any other call does
  Pin& pin = g_pins[index];
  std::strcpy(pin.name, name);
  std::strcpy(pin.library, library.name.c_str());
  pin.caller_start = from.start;
  pin.caller_end = from.end;
  pin.library_start = library.start;
  pin.library_end = library.end;
  pin.fn = fn;
  pin.ready.store(true, std::memory_order_release);
  g_lookups_pinned.fetch_add(1, std::memory_order_release);
}

void* RealTable::resolve(uint64_t caller, uint64_t generation) {
  Module module = caller ? module_of(caller) : Module{};
  bool cacheable = module.found;
  void* fn = nullptr;
  // The caller's own dependency scope: the copy it was linked against. The main program (and
  // memtrace itself, asking on the program's behalf) looks in the global scope.
  const bool global_caller = !module.found || module.main_program || module.name.empty() || in_injector(caller);
  if (!global_caller) {
    bool opened;
    fn = lookup_in_scope_of(module.name, name_, opened);
    cacheable = opened;
  }
  // What the caller's module looked up itself (a static runtime, a private copy of the runtime);
  // then the global scope after us, for the main program, which may also link a runtime; the
  // library the caller's module looks its functions up in; for a module that has no copy of its
  // own, what another looked up; then the CUDA libraries by their usual names (loaded RTLD_LOCAL
  // by a Python extension), then whatever object defines it.
  if (!fn && module.found && (fn = pinned_by(name_, module))) cacheable = true;
  if (!fn && global_caller) fn = ::dlsym(RTLD_NEXT, name_);
  if (!fn && module.found && (fn = in_library_pinned_by(name_, module))) cacheable = true;
  if (!fn) fn = pinned_by_anyone(name_);
  if (!fn && !global_caller) fn = ::dlsym(RTLD_NEXT, name_);
  if (!fn) {
    static const char* const kRuntimeNames[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", nullptr};
    static const char* const kDriverNames[] = {"libcuda.so.1", nullptr};
    for (const char* const* soname = library_ == Library::kRuntime ? kRuntimeNames : kDriverNames; *soname && !fn;
         ++soname) {
      bool opened;
      fn = lookup_in_scope_of(*soname, name_, opened);
    }
  }
  if (!fn) fn = lookup_anywhere(name_);
  if (fn && cacheable) remember(module.start, module.end, generation, fn);
  return fn;
}

void RealTable::remember(uint64_t start, uint64_t end, uint64_t generation, void* fn) {
  // An empty slot, or one left from before an unload, or else the next in turn.
  Slot* target = nullptr;
  for (Slot& slot : slots_) {
    uint64_t seq = slot.sequence.load(std::memory_order_acquire);
    if (seq == 0 || (!(seq & 1) && slot.generation.load(std::memory_order_relaxed) != generation)) {
      target = &slot;
      break;
    }
  }
  if (!target) target = &slots_[next_slot_.fetch_add(1, std::memory_order_relaxed) % kSlots];
  uint64_t seq = target->sequence.load(std::memory_order_relaxed);
  if ((seq & 1) || !target->sequence.compare_exchange_strong(seq, seq + 1, std::memory_order_acq_rel))
    return;  // another thread is writing it: this answer is simply not cached
  std::atomic_thread_fence(std::memory_order_release);
  target->start.store(start, std::memory_order_relaxed);
  target->end.store(end, std::memory_order_relaxed);
  target->generation.store(generation, std::memory_order_relaxed);
  target->fn.store(fn, std::memory_order_relaxed);
  target->sequence.store(seq + 2, std::memory_order_release);
}

}  // namespace memtrace::inject
