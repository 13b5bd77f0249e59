// Holds device memory for a while, for snapshots taken while a program runs: for MS, or with
// --until FILE until FILE exists (saying "hold: holding" on stderr once it holds its buffers).
//   hold [--buffers N] [--hold-ms MS] [--until FILE]
#include <cuda_runtime_api.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "sample_account.h"

int main(int argc, char** argv) {
  sample::Account account;
  const long buffers = sample::arg_value(argc, argv, "--buffers", 5);
  const long hold_ms = sample::arg_value(argc, argv, "--hold-ms", 1500);
  std::vector<void*> held;
  for (long i = 0; i < buffers; ++i) {
    void* p = nullptr;
    SAMPLE_CHECK(cudaMalloc(&p, 3 << 20));  // memtrace-test: hold
    account.call("cudaMalloc", true);
    account.live(0, 3 << 20);
    held.push_back(p);
  }
  const char* until = nullptr;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--until") == 0) until = argv[i + 1];
  if (until) {
    std::fprintf(stderr, "hold: holding\n");
    struct stat st;
    while (::stat(until, &st) != 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(hold_ms));
  }
  for (void* p : held) {
    SAMPLE_CHECK(cudaFree(p));
    account.call("cudaFree", true);
    account.live(0, -(3 << 20));
  }
  account.print();
  return 0;
}
