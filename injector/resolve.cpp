#include <dlfcn.h>

#include "interpose.h"

namespace memtrace::inject {

thread_local int t_depth __attribute__((tls_model("initial-exec"))) = 0;

void* resolve_real(const char* name, Library library) {
  if (void* fn = ::dlsym(RTLD_NEXT, name)) return fn;
  static const char* const kRuntimeNames[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", nullptr};
  static const char* const kDriverNames[] = {"libcuda.so.1", nullptr};
  for (const char* const* soname = library == Library::kRuntime ? kRuntimeNames : kDriverNames; *soname; ++soname) {
    if (void* handle = ::dlopen(*soname, RTLD_LAZY | RTLD_NOLOAD)) {
      void* fn = ::dlsym(handle, name);
      ::dlclose(handle);  // drops only the reference RTLD_NOLOAD took
      if (fn) return fn;
    }
  }
  return nullptr;
}

int runtime_device() {
  static RealFunction<int (*)(int*)> get_device("cudaGetDevice", Library::kRuntime);
  int device = -1;
  auto fn = get_device.get();
  if (!fn || fn(&device) != 0) return -1;
  return device;
}

int driver_device() {
  static RealFunction<int (*)(int*)> get_device("cuCtxGetDevice", Library::kDriver);
  int device = -1;
  auto fn = get_device.get();
  if (!fn || fn(&device) != 0) return -1;
  return device;
}

}  // namespace memtrace::inject
