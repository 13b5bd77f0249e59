// Child processes that use CUDA: one forked (no exec), one fork+exec'd, one posix_spawn'd, and a
// child that never touches CUDA. Every process prints its own account.
//   processes            the parent
//   processes --child N  a child that allocates N buffers
//   processes --idle     a child that touches no CUDA
#include <cuda_runtime_api.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "sample_account.h"

extern char** environ;

namespace {

int allocate_some(long buffers) {
  sample::Account account;
  for (long i = 0; i < buffers; ++i) {
    void* p = nullptr;
    size_t bytes = static_cast<size_t>(i + 1) << 20;
    cudaError_t e = cudaMalloc(&p, bytes);
    account.call("cudaMalloc", e == cudaSuccess);
    SAMPLE_CHECK(e);
    account.live(0, static_cast<int64_t>(bytes));
    if (i % 2 == 0) {
      e = cudaFree(p);
      account.call("cudaFree", e == cudaSuccess);
      SAMPLE_CHECK(e);
      account.live(0, -static_cast<int64_t>(bytes));
    }
  }
  account.print();
  return 0;
}

int wait_for(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--idle") == 0) return 0;
  if (argc > 2 && std::strcmp(argv[1], "--child") == 0) return allocate_some(std::strtol(argv[2], nullptr, 10));

  int failures = 0;
  // Forked before the parent touches CUDA, as CUDA requires.
  pid_t forked = fork();
  if (forked == 0) _exit(allocate_some(3));
  failures += wait_for(forked) != 0;

  pid_t exec_child = fork();
  if (exec_child == 0) {
    execl("/proc/self/exe", argv[0], "--child", "4", static_cast<char*>(nullptr));
    _exit(127);
  }
  failures += wait_for(exec_child) != 0;

  pid_t spawned;
  char child_flag[] = "--child", count[] = "5";
  char* spawn_argv[] = {argv[0], child_flag, count, nullptr};
  if (posix_spawn(&spawned, "/proc/self/exe", nullptr, nullptr, spawn_argv, environ) == 0)
    failures += wait_for(spawned) != 0;
  else
    ++failures;

  pid_t idle;
  char idle_flag[] = "--idle";
  char* idle_argv[] = {argv[0], idle_flag, nullptr};
  if (posix_spawn(&idle, "/proc/self/exe", nullptr, nullptr, idle_argv, environ) == 0) failures += wait_for(idle) != 0;

  int parent_status = allocate_some(2);
  return failures ? 1 : parent_status;
}
