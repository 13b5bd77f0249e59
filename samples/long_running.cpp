// A job that is already running when memtrace joins it (memtrace attach): it holds weights from the
// start, then trains step after step, keeping 64 KiB a step, while other threads allocate and free
// device memory and host memory (malloc) without pause and one waits on a condition variable. It
// checks every buffer it reads back, and runs until the file STOP exists.
//   long_running STOP [--threads T]
// Prints "long_running: ready pid P" once its weights are held, and at the end
// "long_running: done, every check passed" (exit 0) or what failed (exit 1): the same lines
// whether or not memtrace joined it meanwhile.
#include <cuda_runtime_api.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

std::atomic<bool> g_stop{false};
std::atomic<int> g_failures{0};

void fail(const char* what, cudaError_t e) {
  std::fprintf(stderr, "long_running: %s failed: %s\n", what, cudaGetErrorString(e));
  g_failures.fetch_add(1);
}

// Writes a pattern into device memory and reads it back: what the program computes.
void round_trip(void* device, size_t bytes, unsigned char seed) {
  std::vector<unsigned char> out(bytes), in(bytes);
  for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<unsigned char>(seed + i * 7);
  cudaError_t e = cudaMemcpy(device, out.data(), bytes, cudaMemcpyHostToDevice);
  if (e == cudaSuccess) e = cudaMemcpy(in.data(), device, bytes, cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) return fail("cudaMemcpy", e);
  if (in != out) {
    std::fprintf(stderr, "long_running: device memory read back differs\n");
    g_failures.fetch_add(1);
  }
}

void* device_alloc(size_t bytes) {
  void* p = nullptr;
  if (cudaError_t e = cudaMalloc(&p, bytes); e != cudaSuccess) fail("cudaMalloc", e);
  return p;
}

void device_free(void* p) {
  if (cudaError_t e = cudaFree(p); e != cudaSuccess) fail("cudaFree", e);
}

// Allocates and frees device memory without pause: memtrace joins while it is inside CUDA calls.
void cuda_churn(int index) {
  for (unsigned i = 0; !g_stop.load(); ++i) {
    size_t bytes = 4096 * (1 + (i + index) % 16);
    void* p = device_alloc(bytes);
    if (p && i % 64 == 0) round_trip(p, bytes, static_cast<unsigned char>(i));
    device_free(p);
  }
}

// malloc and free without pause: memtrace joins while a thread is inside malloc.
void malloc_churn() {
  std::vector<void*> held(64, nullptr);
  for (unsigned i = 0; !g_stop.load(); ++i) {
    std::free(held[i % held.size()]);
    held[i % held.size()] = std::malloc(16 + (i * 37) % 8192);
  }
  for (void* p : held) std::free(p);
}

std::mutex g_mutex;
std::condition_variable g_wake;
void waiter() {
  std::unique_lock lock(g_mutex);
  g_wake.wait(lock, [] { return g_stop.load(); });
}

bool exists(const char* path) {
  struct stat st;
  return ::stat(path, &st) == 0;
}

void build_model(std::vector<void*>& weights) {
  for (int layer = 0; layer < 4; ++layer) weights.push_back(device_alloc(8 << 20));
}

void* step(int n) {
  void* activations = device_alloc(4 << 20);
  if (activations) round_trip(activations, 4096, static_cast<unsigned char>(n));
  device_free(activations);
  return device_alloc(64 << 10);  // kept: a step's metrics, freed only at the end
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: long_running STOP [--threads T]\n");
    return 2;
  }
  int threads = 2;
  for (int i = 2; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--threads") == 0) threads = std::atoi(argv[++i]);
  std::vector<void*> weights, kept;
  build_model(weights);
  for (void* w : weights)
    if (w) round_trip(w, 4096, 1);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) workers.emplace_back(cuda_churn, t);
  workers.emplace_back(malloc_churn);
  workers.emplace_back(waiter);
  std::printf("long_running: ready pid %d\n", static_cast<int>(::getpid()));
  std::fflush(stdout);
  for (int n = 0; !exists(argv[1]); ++n) {
    kept.push_back(step(n));
    ::usleep(5000);
  }
  {
    std::lock_guard lock(g_mutex);
    g_stop.store(true);
  }
  g_wake.notify_all();
  for (std::thread& t : workers) t.join();
  for (void* p : kept) device_free(p);
  for (void* w : weights) device_free(w);
  if (g_failures.load()) {
    std::printf("long_running: %d checks failed\n", g_failures.load());
    return 1;
  }
  std::printf("long_running: done, every check passed\n");
  return 0;
}
