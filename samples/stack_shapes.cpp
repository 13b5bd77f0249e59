// Allocations from stacks of many shapes, made by several threads at once, so that a test can hold
// each recorded stack to the path that made it, frame by frame. A path goes DEPTH levels down from
// a thread's worker(), each level through left() or right(); an allocation's size says its path:
// 256 * (1 + depth + 64 * bits), where bit L of BITS (L < 12) sends level L right, and a level of
// 12 or more goes right where (depth + level) % 3 == 0. Half the allocations repeat the thread's
// last path (most of a stack is its last one's: the injector sends only what differs), the others
// take a new one at random; depths run to 40, past the default stack depth of 64 frames.
// The last thread allocates once, waits until the others made --gap allocations (a ring's length,
// by default, so that the injector must send its next stack whole), and allocates from the same
// path again.
//   stack_shapes [--threads T] [--allocations N] [--gap G] [--seed S]
#include <cuda_runtime_api.h>

#include <atomic>
#include <random>
#include <thread>
#include <vector>

#include "sample_account.h"

namespace {

sample::SharedAccount account;
std::atomic<long> g_made{0};  // allocations the busy threads made
std::atomic<int> g_done{0};   // busy threads that finished

struct Path {
  int depth = 0;
  unsigned bits = 0;
  size_t bytes() const { return 256 * (1 + static_cast<size_t>(depth) + 64 * static_cast<size_t>(bits)); }
  bool goes_right(int level) const { return level < 12 ? (bits >> level) & 1 : (depth + level) % 3 == 0; }
};

__attribute__((noinline)) void allocate(const Path& path) {
  void* p = nullptr;
  SAMPLE_CHECK(cudaMalloc(&p, path.bytes()));
  account.note("cudaMalloc", true, static_cast<int64_t>(path.bytes()));
  account.note("cudaFree", true, -static_cast<int64_t>(path.bytes()));
  SAMPLE_CHECK(cudaFree(p));
}

__attribute__((noinline)) void descend(const Path& path, int level);

// noipa: left and right are the same code, which the compiler would otherwise fold into one.
__attribute__((noinline, noipa)) void left(const Path& path, int level) {
  descend(path, level + 1);
  asm volatile("" ::: "memory");  // not a tail call: every level stays on the stack
}

__attribute__((noinline, noipa)) void right(const Path& path, int level) {
  descend(path, level + 1);
  asm volatile("" ::: "memory");
}

__attribute__((noinline)) void descend(const Path& path, int level) {
  if (level == path.depth)
    allocate(path);
  else if (path.goes_right(level))
    right(path, level);
  else
    left(path, level);
  asm volatile("" ::: "memory");
}

Path random_path(std::mt19937& random) {
  Path p;
  p.depth = static_cast<int>(random() % 41);
  p.bits = static_cast<unsigned>(random() % 4096) & ((1u << (p.depth < 12 ? p.depth : 12)) - 1);
  return p;
}

__attribute__((noinline)) void worker(unsigned seed, long allocations) {
  std::mt19937 random(seed);
  Path path = random_path(random);
  for (long i = 0; i < allocations; ++i) {
    if (random() % 2) path = random_path(random);
    descend(path, 0);
    g_made.fetch_add(1, std::memory_order_relaxed);
  }
  g_done.fetch_add(1);
}

__attribute__((noinline)) void rare_worker(unsigned seed, long gap, int busy) {
  std::mt19937 random(seed);
  const Path path = random_path(random);
  descend(path, 0);
  const long before = g_made.load();
  while (g_made.load() - before < gap && g_done.load() < busy) std::this_thread::yield();
  descend(path, 0);
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = static_cast<int>(sample::arg_value(argc, argv, "--threads", 4));
  const long allocations = sample::arg_value(argc, argv, "--allocations", 3000);
  const long gap = sample::arg_value(argc, argv, "--gap", 2000);
  const unsigned seed = static_cast<unsigned>(sample::arg_value(argc, argv, "--seed", 1));
  SAMPLE_CHECK(cudaSetDevice(0));
  std::vector<std::thread> workers;
  workers.emplace_back(rare_worker, seed, gap, threads - 1);
  for (int t = 1; t < threads; ++t) workers.emplace_back(worker, seed + static_cast<unsigned>(t), allocations);
  for (std::thread& w : workers) w.join();
  account.print();
  return 0;
}
