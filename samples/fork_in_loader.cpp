// fork while another thread is inside dl_iterate_phdr, as memtrace's stack walks are whenever
// libunwind meets a frame it has not seen (it finds the frame's unwind table through the loader)
// and as a C++ runtime finding an exception's handler is. glibc (2.36) leaves its loader's lock
// held in the child then: the child's first dl_iterate_phdr, or dlopen, would wait forever. One
// thread allocates and walks the loaded modules without pause, slowly (as a search through each
// module's tables is); the main thread forks --forks N children, each of which walks the modules,
// loads a library and allocates. A child not done within 20 s is hung: killed, reported, and the
// program fails.
//   fork_in_loader [--forks N]
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <thread>

#include "fork_children.h"
#include "sample_account.h"

namespace {

std::atomic<bool> g_stop{false};

int slow_visit(dl_phdr_info*, size_t, void* data) {
  for (int k = 0; k < 20000; ++k) asm volatile("" ::"r"(k));  // the time a search of its tables takes
  ++*static_cast<long*>(data);
  return 0;
}

void walk_modules_forever() {
  long visited = 0;
  while (!g_stop.load(std::memory_order_relaxed)) {
    void* p = nullptr;
    if (cudaMalloc(&p, 4096) == cudaSuccess) cudaFree(p);
    for (int i = 0; i < 20; ++i) dl_iterate_phdr(slow_visit, &visited);  // inside it nearly all the time
  }
}

}  // namespace

int main(int argc, char** argv) {
  const long forks = sample::arg_value(argc, argv, "--forks", 20);
  void* first = nullptr;
  if (cudaMalloc(&first, 4096) == cudaSuccess) cudaFree(first);  // CUDA and memtrace ready first
  std::thread walker(walk_modules_forever);
  sample::ForkCounts counts = sample::fork_children("fork_in_loader", forks, [] {
    long visited = 0;
    dl_iterate_phdr(slow_visit, &visited);
    void* library = ::dlopen("libm.so.6", RTLD_NOW);
    void* p = nullptr;
    if (cudaMalloc(&p, 4096) == cudaSuccess) cudaFree(p);
    return visited > 0 && library ? 0 : 3;
  });
  g_stop = true;
  walker.join();
  std::printf("forks %ld hung %d failed %d\n", forks, counts.hung, counts.failed);
  return counts.hung || counts.failed ? 1 : 0;
}
