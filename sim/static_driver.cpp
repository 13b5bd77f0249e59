// The static runtime's way to the driver (static_driver.h), and the ledger and API callback
// calls it makes, which libcuda.so.1 defines: this archive links neither.
#include "static_driver.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

#include "api_callbacks.h"
#include "ledger.h"

namespace {

void* driver_library() {
  // NVIDIA's static runtime opens the driver by its soname, privately.
  static void* handle = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  return handle;
}

[[noreturn]] void missing(const char* what) {
  std::fprintf(stderr, "simulated static runtime: libcuda.so.1 has no %s (%s)\n", what,
               driver_library() ? "loaded" : ::dlerror());
  std::abort();
}

void* driver_symbol(const char* name) {
  void* fn = driver_library() ? ::dlsym(driver_library(), name) : nullptr;
  if (!fn) missing(name);
  return fn;
}

}  // namespace

void* sim_static::driver_function(const char* name, unsigned long long flags) {
  using GetProcAddress = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  static const auto get_proc_address = reinterpret_cast<GetProcAddress>(driver_symbol("cuGetProcAddress_v2"));
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status;
  if (get_proc_address(name, &fn, CUDA_VERSION, flags, &status) != CUDA_SUCCESS || !fn) missing(name);
  return fn;
}

extern "C" {
int memtrace_sim_enter(void) {
  static const auto fn = reinterpret_cast<int (*)()>(driver_symbol("memtrace_sim_enter"));
  return fn();
}
void memtrace_sim_leave(int outermost, const char* api, int result, uint64_t bytes, int counted) {
  static const auto fn =
      reinterpret_cast<void (*)(int, const char*, int, uint64_t, int)>(driver_symbol("memtrace_sim_leave"));
  fn(outermost, api, result, bytes, counted);
}
void memtrace_sim_api_event(int domain, int cbid, int site, const char* name, const void* params, const void* result) {
  static const auto fn = reinterpret_cast<void (*)(int, int, int, const char*, const void*, const void*)>(
      driver_symbol("memtrace_sim_api_event"));
  fn(domain, cbid, site, name, params, result);
}
uint64_t memtrace_sim_allocation_size(uint64_t addr) {
  static const auto fn = reinterpret_cast<uint64_t (*)(uint64_t)>(driver_symbol("memtrace_sim_allocation_size"));
  return fn(addr);
}
}
