// The training-loop sample's sequence of allocations and frees, made with malloc and free on
// the host, for heaptrack to record: its bytes per event beside memtrace's on the same sequence.
//   malloc_free_loop [--steps N] [--layers L]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

long arg(int argc, char** argv, const char* name, long fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::strtol(argv[i + 1], nullptr, 10);
  return fallback;
}

__attribute__((noinline)) void* device_alloc(size_t bytes) {
  void* p = std::malloc(bytes);
  asm volatile("" ::"r"(p) : "memory");
  return p;
}

__attribute__((noinline)) void device_free(void* p) { std::free(p); }

}  // namespace

int main(int argc, char** argv) {
  const long steps = arg(argc, argv, "--steps", 20);
  const int layers = static_cast<int>(arg(argc, argv, "--layers", 8));
  const size_t layer_bytes = static_cast<size_t>(arg(argc, argv, "--layer-kib", 64)) << 10;
  std::vector<void*> model;
  void* host = device_alloc(1 << 20);
  for (int i = 0; i < 4 * layers; ++i) model.push_back(device_alloc(layer_bytes));
  for (long step = 0; step < steps; ++step) {
    std::vector<void*> activations;
    for (int i = 0; i < layers; ++i) activations.push_back(device_alloc(layer_bytes / 2 + 4096));
    void* workspace = device_alloc(3 * layer_bytes);
    for (auto it = activations.rbegin(); it != activations.rend(); ++it) device_free(*it);
    device_free(workspace);
  }
  for (void* p : model) device_free(p);
  device_free(host);
  std::printf("events %ld\n", 2 + 8L * layers + steps * 2 * (layers + 1));
  return 0;
}
