// What the fork samples (fork_in_call, fork_in_loader) share: children forked one after the
// other while the program's other threads keep working, each running a function and exiting with
// its result. A child not done within 20 s is hung (a lock a thread that is gone in the child
// held): its stack is shown on standard error (with gdb, when installed), it is killed, and
// counted. 20 s is a deadline for a hang, never a wait: a child that finishes is seen at once.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

namespace sample {

struct ForkCounts {
  int hung = 0, failed = 0;
};

inline void describe_hung(const char* program, pid_t child) {
  if (::access("/usr/bin/gdb", X_OK) != 0) return;
  std::string command =
      "/usr/bin/gdb -batch -nx -p " + std::to_string(child) + " -ex 'thread apply all bt' 1>&2 2>/dev/null";
  if (std::system(command.c_str()) != 0) std::fprintf(stderr, "%s: gdb could not show the child\n", program);
}

// Forks FORKS children one at a time, each running CHILD (its result is the child's exit status),
// with PAUSE between them (to let the other threads get back into what they do).
template <typename Child>
ForkCounts fork_children(const char* program, long forks, Child child,
                         std::chrono::milliseconds pause = std::chrono::milliseconds(0)) {
  ForkCounts counts;
  for (long i = 0; i < forks; ++i) {
    pid_t pid = ::fork();
    if (pid < 0) {
      std::perror("fork");
      ++counts.failed;
      continue;
    }
    if (pid == 0) ::_exit(child());
    int status = 0;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (::waitpid(pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        std::fprintf(stderr, "%s: child %d (fork %ld) hung\n", program, pid, i);
        describe_hung(program, pid);
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &status, 0);
        ++counts.hung;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++counts.failed;
    std::this_thread::sleep_for(pause);
  }
  return counts;
}

}  // namespace sample
