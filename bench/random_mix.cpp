// A random mix of allocations, as a program whose sizes and lifetimes follow no pattern makes
// them: sizes from 16 B to 64 KiB, from four call sites, each freed after a random number of later
// allocations (at most 1,000 live). With cudaMalloc/cudaFree, for memtrace; with malloc/free
// (--host), for heaptrack: the same sequence either way (a fixed seed). Prints its event count.
//   random_mix [--events N] [--host]
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

namespace {

bool g_host = false;

void* allocate(size_t bytes) {
  if (g_host) return std::malloc(bytes);
  void* p = nullptr;
  return cudaMalloc(&p, bytes) == cudaSuccess ? p : nullptr;
}

void release(void* p) {
  if (g_host)
    std::free(p);
  else
    cudaFree(p);
}

// Four sites: each a function of its own, so that each has a stack of its own.
__attribute__((noinline)) void* embeddings(size_t bytes) { return allocate(bytes); }
__attribute__((noinline)) void* attention(size_t bytes) { return allocate(bytes); }
__attribute__((noinline)) void* buffers(size_t bytes) { return allocate(bytes); }
__attribute__((noinline)) void* scratch(size_t bytes) { return allocate(bytes); }

}  // namespace

int main(int argc, char** argv) {
  long events = 1'000'000;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--host") == 0) g_host = true;
    if (std::strcmp(argv[i], "--events") == 0 && i + 1 < argc) events = std::atol(argv[++i]);
  }
  std::mt19937_64 random(20261202);
  std::uniform_int_distribution<int> site(0, 3), size_log(4, 16);  // 16 B .. 64 KiB
  void* (*sites[])(size_t) = {embeddings, attention, buffers, scratch};
  std::vector<void*> live;
  long made = 0;
  while (made + 2 <= events) {
    const size_t bytes = (size_t{1} << size_log(random)) + random() % 64;
    live.push_back(sites[site(random)](bytes));
    ++made;
    if (live.size() > 1000 || random() % 2) {  // a random one of the live ones goes
      const size_t at = random() % live.size();
      release(live[at]);
      live[at] = live.back();
      live.pop_back();
      ++made;
    }
  }
  for (void* p : live) release(p);
  std::printf("events %ld\n", made + static_cast<long>(live.size()));
  return 0;
}
