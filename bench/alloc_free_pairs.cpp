// N allocation/free pairs made 30 frames deep, timed by the program itself: with cudaMalloc and
// cudaFree (for memtrace; run on the simulated device with MEMTRACE_SIM_UNBACKED=1, so that no
// system call hides the cost being measured), or with malloc and free (--host, for heaptrack).
// With --threads T, T threads make N pairs each at once. Prints {"ns_per_pair": ..,
// "events_per_s": ..}: the wall time of one thread's pair, and every thread's events (an
// allocation or a free) per second of wall time.
//   alloc_free_pairs [--pairs N] [--depth D] [--threads T] [--host]
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <thread>
#include <vector>

namespace {

bool g_host = false;

__attribute__((noinline)) void* allocate(size_t bytes) {
  if (g_host) return std::malloc(bytes);
  void* p = nullptr;
  return cudaMalloc(&p, bytes) == cudaSuccess ? p : nullptr;
}

__attribute__((noinline)) void release(void* p) {
  if (g_host)
    std::free(p);
  else
    cudaFree(p);
}

__attribute__((noinline)) void pairs(long n) {
  for (long i = 0; i < n; ++i) {
    void* p = allocate(64 << 10);
    asm volatile("" ::"r"(p) : "memory");
    release(p);
  }
}

__attribute__((noinline)) void at_depth(int depth, long n) {
  if (depth > 1)
    at_depth(depth - 1, n);
  else
    pairs(n);
  asm volatile("" ::: "memory");  // not a tail call: every level stays on the stack
}

double now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

}  // namespace

int main(int argc, char** argv) {
  long n = 200000;
  int depth = 30, threads = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--host") == 0) g_host = true;
    if (std::strcmp(argv[i], "--pairs") == 0 && i + 1 < argc) n = std::atol(argv[++i]);
    if (std::strcmp(argv[i], "--depth") == 0 && i + 1 < argc) depth = std::atoi(argv[++i]);
    if (std::strcmp(argv[i], "--threads") == 0 && i + 1 < argc) threads = std::atoi(argv[++i]);
  }
  at_depth(depth, n / 10);  // warm up: libraries bound, caches filled
  double start = now_ns();
  if (threads <= 1) {
    at_depth(depth, n);
  } else {
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) workers.emplace_back([depth, n] { at_depth(depth, n); });
    for (std::thread& w : workers) w.join();
  }
  const double elapsed = now_ns() - start;
  std::printf("{\"ns_per_pair\": %.1f, \"events_per_s\": %.0f}\n", elapsed / static_cast<double>(n),
              2.0 * static_cast<double>(n) * (threads > 1 ? threads : 1) / elapsed * 1e9);
  return 0;
}
