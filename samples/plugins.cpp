// Allocations from libraries loaded with dlopen, and unloaded before the program ends: one with
// debug information, one stripped. Their frames must still name them.
//   plugins DIR   (DIR holds libplugin_alloc.so and libplugin_stripped.so)
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdio>
#include <string>

#include "sample_account.h"

int main(int argc, char** argv) {
  sample::Account account;
  std::string dir = argc > 1 ? argv[1] : ".";
  for (const char* name : {"libplugin_alloc.so", "libplugin_stripped.so"}) {
    void* lib = dlopen((dir + "/" + name).c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      std::fprintf(stderr, "cannot load %s: %s\n", name, dlerror());
      return 2;
    }
    auto allocate = reinterpret_cast<void* (*)(size_t)>(dlsym(lib, "plugin_allocate"));
    void* p = allocate(2 << 20);
    account.call("cudaMalloc", p != nullptr);
    SAMPLE_CHECK(cudaFree(p));
    account.call("cudaFree", true);
    dlclose(lib);
  }
  void* p = nullptr;
  SAMPLE_CHECK(cudaMalloc(&p, 4096));  // after the plugins are gone
  account.call("cudaMalloc", true);
  SAMPLE_CHECK(cudaFree(p));
  account.call("cudaFree", true);
  account.print();
  return 0;
}
