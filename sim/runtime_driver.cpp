#include "runtime_driver.h"

#include <dlfcn.h>

#include <atomic>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>

#include "cudart_driver_lookups.h"
#include "export_tables.h"
#include "pid_path.h"

#ifdef MEMTRACE_SIM_RUNTIME_VERSION
#define SIM_RUNTIME_VERSION MEMTRACE_SIM_RUNTIME_VERSION
#else
#define SIM_RUNTIME_VERSION CUDART_VERSION
#endif

namespace sim_runtime {
namespace {

// Where each of Driver's members comes from.
struct Slot {
  const char* name;
  int version;
  unsigned long long flags;
  size_t offset;
};
constexpr Slot kSlots[] = {
#define SIM_RUNTIME_DRIVER_SLOT(member, type, name, version, flags) {name, version, flags, offsetof(Driver, member)},
    SIM_RUNTIME_DRIVER_FUNCTIONS(SIM_RUNTIME_DRIVER_SLOT)
#undef SIM_RUNTIME_DRIVER_SLOT
};

// The runtime asks for nothing NVIDIA's does not: every slot is one of its lookups.
constexpr bool asked_by_nvidias_runtime(const Slot& slot) {
  for (const sim::DriverLookup& l : sim::kCudart13DriverLookups)
    if (std::string_view(l.name) == slot.name && l.version == slot.version && l.flags == slot.flags) return true;
  return false;
}
constexpr bool every_slot_asked() {
  for (const Slot& s : kSlots)
    if (!asked_by_nvidias_runtime(s)) return false;
  return true;
}
static_assert(every_slot_asked(), "a driver function the runtime takes is not one NVIDIA's runtime asks for");

// A runtime of an older CUDA release asks for what NVIDIA's 13.0 asks that its release knows: an
// assumption (what NVIDIA's 12.x runtimes ask was not observed).
constexpr int kRuntimeVersion = SIM_RUNTIME_VERSION;

struct State {
  Driver driver{};
  const sim::SimHooks* hooks = nullptr;
  cudaError_t error = cudaSuccess;
  CUresult init_result = CUDA_ERROR_NOT_INITIALIZED;
};

[[nodiscard]] cudaError_t fail(const char* what) {
  std::fprintf(stderr, "simulated CUDA runtime: %s\n", what);
  return cudaErrorInsufficientDriver;
}

cudaError_t initialize(State& s) {
  // NVIDIA's static runtime opens the driver by its soname, privately, as its shared one does.
  void* library = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!library) return cudaErrorInsufficientDriver;
  auto get_proc = reinterpret_cast<PFN_cuGetProcAddress_v12000>(::dlsym(library, "cuGetProcAddress_v2"));
  if (!get_proc) return cudaErrorInsufficientDriver;
  void* fn = nullptr;
  CUdriverProcAddressQueryResult found;
  get_proc("", &fn, 0, 0, &found);  // NVIDIA's probe: nothing has that name
  auto* members = reinterpret_cast<char*>(&s.driver);
  for (const sim::DriverLookup& l : sim::kCudart13DriverLookups) {
    if (l.version > kRuntimeVersion) continue;
    fn = nullptr;
    if (get_proc(l.name, &fn, l.version, l.flags, &found) != CUDA_SUCCESS) fn = nullptr;
    for (const Slot& slot : kSlots)
      if (slot.version == l.version && slot.flags == l.flags && std::strcmp(slot.name, l.name) == 0)
        std::memcpy(members + slot.offset, &fn, sizeof fn);
  }
  for (const Slot& slot : kSlots) {
    void* got = nullptr;
    std::memcpy(&got, members + slot.offset, sizeof got);
    if (!got && slot.version <= kRuntimeVersion) {  // a newer release's function stays null
      char what[160];
      std::snprintf(what, sizeof what, "the driver handed over no %s at %d", slot.name, slot.version);
      return fail(what);
    }
  }
  // NVIDIA's private tables, which NVIDIA's runtime cannot do without and ours needs none of, with
  // the driver's initialization after the first, as NVIDIA's runtime makes it; then the simulated
  // device's own table.
  const void* table = nullptr;
  bool first = true;
  for (const CUuuid& id : sim::kNvidiaRuntimeTables) {
    s.driver.cuGetExportTable(&table, &id);
    if (first) s.init_result = s.driver.cuInit(0);
    first = false;
  }
  table = nullptr;
  if (s.driver.cuGetExportTable(&table, &sim::kSimHooksTable) != CUDA_SUCCESS || !table ||
      static_cast<const sim::SimHooks*>(table)->size < sizeof(sim::SimHooks))
    return cudaErrorSymbolNotFound;
  s.hooks = static_cast<const sim::SimHooks*>(table);
  return cudaSuccess;
}

// MEMTRACE_SIM_RUNTIME_DRIVER_TABLE=FILE (`%p` in FILE becomes the pid): once initialized, the
// runtime writes where each driver function it was handed lies, one line each,
//   <function> <library file>
// so a test sees whose functions the runtime calls (the driver's, or an interposer's).
void write_driver_table(const Driver& driver) {
  const std::string path = sim::path_from_environment("MEMTRACE_SIM_RUNTIME_DRIVER_TABLE");
  if (path.empty()) return;
  FILE* out = std::fopen(path.c_str(), "we");
  if (!out) return;
  const auto* members = reinterpret_cast<const char*>(&driver);
  for (const Slot& slot : kSlots) {
    void* fn = nullptr;
    std::memcpy(&fn, members + slot.offset, sizeof fn);
    Dl_info info{};
    const char* file = fn && ::dladdr(fn, &info) && info.dli_fname ? info.dli_fname : "?";
    const char* base = std::strrchr(file, '/');
    std::fprintf(out, "%s%s %s\n", slot.name, slot.flags ? "_ptsz" : "", base ? base + 1 : file);
  }
  std::fclose(out);
}

// Initialized once, by the first thread to need it; a thread that calls back into the runtime
// while initializing it (through a tool the driver loads) gets no driver rather than a deadlock:
// the stand-in's choice, what NVIDIA's runtime does then is not known.
std::mutex g_mutex;
std::atomic<State*> g_state{nullptr};
thread_local bool t_initializing = false;

const State* state() {
  if (const State* s = g_state.load(std::memory_order_acquire)) return s;
  if (t_initializing) return nullptr;
  std::lock_guard lock(g_mutex);
  if (State* s = g_state.load(std::memory_order_acquire)) return s;
  t_initializing = true;
  auto* s = new State;  // never freed: calls may come during exit
  s->error = initialize(*s);
  t_initializing = false;
  if (s->error == cudaSuccess) write_driver_table(s->driver);
  g_state.store(s, std::memory_order_release);
  return s;
}

int no_enter() { return 0; }
void no_leave(int, const char*, int, uint64_t, int) {}
void no_api_event(int, int, int, const char*, const void*, const void*) {}
uint64_t no_allocation_size(uint64_t) { return 0; }
const sim::SimHooks kNoHooks = {sizeof(sim::SimHooks), no_enter, no_leave, no_api_event, no_allocation_size};

}  // namespace

CUresult driver_init_result() {
  const State* s = state();
  return s ? s->init_result : CUDA_ERROR_NOT_INITIALIZED;
}

const Driver* driver(cudaError_t* error) {
  const State* s = state();
  if (error) *error = s ? s->error : cudaErrorInitializationError;
  return s && s->error == cudaSuccess ? &s->driver : nullptr;
}

}  // namespace sim_runtime

const sim::SimHooks& sim::hooks() {
  const sim_runtime::State* s = sim_runtime::state();
  return s && s->hooks ? *s->hooks : sim_runtime::kNoHooks;
}
