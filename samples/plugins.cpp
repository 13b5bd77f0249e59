// Allocations from libraries loaded with dlopen, and unloaded before the program ends: one with
// debug information, one stripped. Their frames must still name them. Each plugin allocates
// --repeat N times (default 1). DIR may be relative ("."), as in ctypes.CDLL("./x.so").
//   plugins DIR [--repeat N]   (DIR holds libplugin_alloc.so and libplugin_stripped.so)
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdio>
#include <string>

#include "sample_account.h"

int main(int argc, char** argv) {
  sample::Account account;
  std::string dir = argc > 1 ? argv[1] : ".";
  const long repeat = sample::arg_value(argc, argv, "--repeat", 1);
  for (const char* name : {"libplugin_alloc.so", "libplugin_stripped.so"}) {
    void* lib = dlopen((dir + "/" + name).c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      std::fprintf(stderr, "cannot load %s: %s\n", name, dlerror());
      return 2;
    }
    auto allocate = reinterpret_cast<void* (*)(size_t)>(dlsym(lib, "plugin_allocate"));
    for (long i = 0; i < repeat; ++i) {
      void* p = allocate(2 << 20);
      account.call("cudaMalloc", p != nullptr);
      account.live(0, 2 << 20);
      SAMPLE_CHECK(cudaFree(p));
      account.call("cudaFree", true);
      account.live(0, -(2 << 20));
    }
    dlclose(lib);
  }
  void* p = nullptr;
  SAMPLE_CHECK(cudaMalloc(&p, 4096));  // memtrace-test: after-plugins
  account.call("cudaMalloc", true);
  account.live(0, 4096);
  SAMPLE_CHECK(cudaFree(p));
  account.call("cudaFree", true);
  account.live(0, -4096);
  account.print();
  return 0;
}
