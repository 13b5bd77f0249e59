// Holds device memory for a while, for snapshots taken while a program runs.
//   hold [--buffers N] [--hold-ms MS]
#include <cuda_runtime_api.h>

#include <chrono>
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
  std::this_thread::sleep_for(std::chrono::milliseconds(hold_ms));
  for (void* p : held) {
    SAMPLE_CHECK(cudaFree(p));
    account.call("cudaFree", true);
    account.live(0, -(3 << 20));
  }
  account.print();
  return 0;
}
