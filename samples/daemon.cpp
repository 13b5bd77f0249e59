// A daemon: the program allocates, starts a grandchild that detaches (double fork, new session)
// and exits; the grandchild allocates on its own after its parent is gone.
#include <cuda_runtime_api.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "sample_account.h"

namespace {
int allocate_some(size_t bytes) {
  sample::Account account;
  void* p = nullptr;
  SAMPLE_CHECK(cudaMalloc(&p, bytes));
  account.call("cudaMalloc", true);
  account.live(0, static_cast<int64_t>(bytes));
  SAMPLE_CHECK(cudaFree(p));
  account.call("cudaFree", true);
  account.live(0, -static_cast<int64_t>(bytes));
  account.print();
  return 0;
}
}  // namespace

int main() {
  pid_t child = fork();
  if (child == 0) {
    setsid();
    if (fork() != 0) _exit(0);  // the grandchild lives on alone
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    _exit(allocate_some(7 << 20));
  }
  waitpid(child, nullptr, 0);
  return allocate_some(3 << 20);
}
