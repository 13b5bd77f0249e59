// A program with signal handlers of its own: SIGINT asks it to stop, which it does cleanly
// (freeing what it holds); SIGCHLD and SIGSEGV handlers are installed as training jobs do.
// memtrace must leave them alone and pass Ctrl-C on.
//   signals [--max-ms MS]
#include <cuda_runtime_api.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <thread>
#include <vector>

#include "sample_account.h"

namespace {
volatile std::sig_atomic_t g_stop = 0;
void on_interrupt(int) { g_stop = 1; }
void on_child(int) {}
void on_segv(int) { std::_Exit(99); }
}  // namespace

int main(int argc, char** argv) {
  sample::Account account;
  std::signal(SIGINT, on_interrupt);
  std::signal(SIGCHLD, on_child);
  std::signal(SIGSEGV, on_segv);
  const long max_ms = sample::arg_value(argc, argv, "--max-ms", 5000);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(max_ms);
  std::vector<void*> held;
  while (!g_stop && std::chrono::steady_clock::now() < deadline) {
    void* p = nullptr;
    SAMPLE_CHECK(cudaMalloc(&p, 1 << 20));
    account.call("cudaMalloc", true);
    account.live(0, 1 << 20);
    held.push_back(p);
    if (held.size() == 1 && !g_stop) {  // a test interrupts it once it can
      std::fputs("signals: running\n", stderr);
      std::fflush(stderr);
    }
    if (held.size() > 16) {
      SAMPLE_CHECK(cudaFree(held.front()));
      account.call("cudaFree", true);
      account.live(0, -(1 << 20));
      held.erase(held.begin());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  for (void* p : held) {
    SAMPLE_CHECK(cudaFree(p));
    account.call("cudaFree", true);
    account.live(0, -(1 << 20));
  }
  account.print();
  return g_stop ? 0 : 3;  // 3: nobody interrupted it
}
