// A plugin the `plugins` sample loads with dlopen and unloads before it ends. Built twice: with
// debug information, and stripped of every symbol but its entry point.
#include <cuda_runtime_api.h>

namespace {
__attribute__((noinline)) void* plugin_internal_alloc(size_t bytes) {
  void* p = nullptr;
  cudaMalloc(&p, bytes);  // memtrace-test: plugin
  return p;
}
}  // namespace

extern "C" void* plugin_allocate(size_t bytes) {
  void* p = plugin_internal_alloc(bytes);
  asm volatile("" ::: "memory");
  return p;
}
