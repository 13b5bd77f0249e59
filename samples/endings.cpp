// The ways a program ends, each after allocating: `static` frees and allocates in a static
// destructor after main returns; `thread-local` frees in a thread_local's destructor as its
// thread ends; `segv` and `abort` crash; `exit-thread` calls _exit(7) from a thread while the
// main thread is allocating.
//   endings static|thread-local|segv|abort|exit-thread
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <thread>

#include "sample_account.h"

namespace {

void* allocate(size_t bytes) {
  void* p = nullptr;
  SAMPLE_CHECK(cudaMalloc(&p, bytes));
  return p;
}

struct FreedAtExit {
  void* p = nullptr;
  ~FreedAtExit() {
    if (!p) return;
    cudaFree(p);
    void* late = allocate(1 << 20);  // after main returned
    cudaFree(late);
  }
};
FreedAtExit g_static;

struct FreedWithThread {
  void* p = nullptr;
  ~FreedWithThread() {
    if (p) cudaFree(p);
  }
};
thread_local FreedWithThread t_held;

}  // namespace

int main(int argc, char** argv) {
  const char* how = argc > 1 ? argv[1] : "static";
  for (int i = 0; i < 10; ++i) cudaFree(allocate(2 << 20));
  if (std::strcmp(how, "static") == 0) {
    g_static.p = allocate(4 << 20);
    return 0;
  }
  if (std::strcmp(how, "thread-local") == 0) {
    std::thread([] { t_held.p = allocate(3 << 20); }).join();
    return 0;
  }
  if (std::strcmp(how, "segv") == 0) {
    allocate(5 << 20);
    volatile int* nowhere = nullptr;
    return *nowhere;
  }
  if (std::strcmp(how, "abort") == 0) {
    allocate(5 << 20);
    std::abort();
  }
  if (std::strcmp(how, "exit-thread") == 0) {
    std::thread([] {
      for (int i = 0; i < 10; ++i) allocate(1 << 20);
      _exit(7);  // the whole process ends here, main never returns
    }).detach();
    for (;;) pause();
  }
  return 2;
}
