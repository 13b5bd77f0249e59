#include "api_callbacks.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

std::atomic<memtrace_sim_api_callback> g_callback{nullptr};
std::atomic<memtrace_sim_memory_activity> g_activity{nullptr};

// MEMTRACE_SIM_SILENT_API: function names, separated by commas.
bool silent(const char* name) {
  static const std::string silenced = [] {
    const char* v = ::secure_getenv("MEMTRACE_SIM_SILENT_API");
    return v ? "," + std::string(v) + "," : std::string();
  }();
  return name && !silenced.empty() && silenced.find("," + std::string(name) + ",") != std::string::npos;
}

uint64_t unreported_bytes() {
  static const uint64_t bytes = [] {
    const char* v = ::secure_getenv("MEMTRACE_SIM_NO_ACTIVITY_BYTES");
    return v ? std::strtoull(v, nullptr, 10) : 0;
  }();
  return bytes;
}

}  // namespace

extern "C" {

void memtrace_sim_set_api_callback(memtrace_sim_api_callback callback) { g_callback.store(callback); }

void memtrace_sim_api_event(int domain, int cbid, int site, const char* name, const void* params, const void* result) {
  memtrace_sim_api_callback callback = g_callback.load(std::memory_order_acquire);
  if (callback && !silent(name)) callback(domain, cbid, site, name, params, result);
}

void memtrace_sim_set_memory_activity(memtrace_sim_memory_activity activity) { g_activity.store(activity); }

}  // extern "C"

void sim::memory_activity(bool released, int memory_kind, uint64_t address, uint64_t bytes, int device) {
  memtrace_sim_memory_activity activity = g_activity.load(std::memory_order_acquire);
  if (activity && !(bytes && bytes == unreported_bytes()))
    activity(released ? 1 : 0, memory_kind, address, bytes, device);
}
