// A program without CUDA of its own that loads a plugin shipping its own renamed CUDA runtime
// (as a Python extension from a wheel would), and allocates through it: --calls N (default 9)
// cudaMalloc of 1 MiB each, then frees them. Prints each call's result.
//   vendored_host DIR [--calls N]   (DIR holds libvendored_plugin.so and its runtime)
#include <cstdio>
#include <vector>

#include "sample_account.h"
#include "vendored_runtime.h"

int main(int argc, char** argv) {
  sample::Account account;
  if (argc < 2) {
    std::fprintf(stderr, "usage: vendored_host DIR [--calls N]\n");
    return 2;
  }
  sample::VendoredPlugin plugin = sample::VendoredPlugin::load(argv[1]);
  const long calls = sample::arg_value(argc, argv, "--calls", 9);
  std::vector<void*> held;
  int failures = 0;
  for (long i = 0; i < calls; ++i) {
    void* p = nullptr;
    int e = plugin.malloc(&p, 1 << 20);
    std::printf("cudaMalloc %ld: %d\n", i, e);
    account.call("cudaMalloc", e == 0);
    if (e != 0) {
      ++failures;
      continue;
    }
    account.live(0, 1 << 20);
    held.push_back(p);
  }
  for (void* p : held) {
    int e = plugin.free(p);
    account.call("cudaFree", e == 0);
    if (e == 0) account.live(0, -(1 << 20));
    failures += e != 0;
  }
  std::fflush(stdout);
  account.print();
  return failures ? 1 : 0;
}
