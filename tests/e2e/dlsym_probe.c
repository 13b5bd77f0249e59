/* What dlsym answers in a traced program, printed as one JSON object for the tests: each answer's
   module, and what dlerror said after it. memtrace's dlsym must change only the answer to a
   lookup of a CUDA allocation entry point in a CUDA library's handle. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

static const char* module_of(void* fn) {
  Dl_info info;
  if (!fn || !dladdr(fn, &info) || !info.dli_fname) return "";
  const char* slash = strrchr(info.dli_fname, '/');
  return slash ? slash + 1 : info.dli_fname;
}

static void answer(const char* key, void* fn, int last) {
  const char* error = dlerror();
  printf("\"%s\":{\"module\":\"%s\",\"error\":%s}%s", key, module_of(fn), error ? "true" : "false", last ? "" : ",");
}

int main(void) {
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!cuda) {
    fprintf(stderr, "dlsym_probe: %s\n", dlerror());
    return 2;
  }
  dlerror();
  printf("{");
  /* Relative to the caller: the first definition after the main program (memtrace's, preloaded). */
  answer("next_after_main", dlsym(RTLD_NEXT, "cuMemAlloc_v2"), 0);
  answer("default_scope", dlsym(RTLD_DEFAULT, "cuMemAlloc_v2"), 0);
  answer("handle_allocation", dlsym(cuda, "cuMemAlloc_v2"), 0);
  answer("handle_proc_address", dlsym(cuda, "cuGetProcAddress_v2"), 0);
  answer("handle_other", dlsym(cuda, "cuDeviceGetName"), 0);
  answer("handle_export_table", dlsym(cuda, "cuGetExportTable"), 0);
  answer("handle_missing", dlsym(cuda, "cuNoSuchFunction"), 0);
  answer("after_missing", dlsym(cuda, "cuMemFree_v2"), 1);
  printf("}\n");
  return 0;
}
