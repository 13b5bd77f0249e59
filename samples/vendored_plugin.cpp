// A plugin as auditwheel ships them: linked against its own renamed copy of the CUDA runtime
// (libcudart-3f2a9c1e.so.12 beside it, found through RPATH $ORIGIN), and loaded RTLD_LOCAL by its
// host, so its runtime is in no global lookup scope. Its calls must reach that copy.
//
// Its calls check their results, as real extensions do: memtrace tells which copy a call belongs
// to by its return address, which a tail call (`return cudaMalloc(...)`) would hand to the
// plugin's own caller.
#include <cuda_runtime_api.h>

#include <cstdio>

namespace {
int checked(cudaError_t e, const char* what) {
  if (e != cudaSuccess) std::fprintf(stderr, "plugin: %s failed with %d\n", what, static_cast<int>(e));
  return e;
}
}  // namespace

extern "C" {

int plugin_set_device(int device) { return cudaSetDevice(device); }

int plugin_malloc(void** p, size_t bytes) {
  return checked(cudaMalloc(p, bytes), "cudaMalloc");  // memtrace-test: vendored-malloc
}

int plugin_free(void* p) { return checked(cudaFree(p), "cudaFree"); }

int plugin_last_error() { return cudaGetLastError(); }

// The device the plugin's runtime says P is on, -1 when it cannot say.
int plugin_device_of(const void* p) {
  cudaPointerAttributes attributes{};
  return cudaPointerGetAttributes(&attributes, p) == cudaSuccess ? attributes.device : -1;
}

}  // extern "C"
