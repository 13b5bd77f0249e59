// A set-user-ID program (the test makes a copy of it root's, mode 4755) that uses CUDA, run by
// another user under memtrace run: its loader ignores LD_PRELOAD and LD_LIBRARY_PATH (it finds the
// simulated runtime by its absolute RUNPATH), the simulated driver reads CUDA_INJECTION64_PATH with
// secure_getenv, and a library it loads itself (argv[1], as a plugin: memtrace's injector) refuses
// to record. It prints the libraries of memtrace's and CUPTI's it ended up with.
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <string.h>

static int print_ours(struct dl_phdr_info* info, size_t size, void* data) {
  (void)size;
  (void)data;
  if (strstr(info->dlpi_name, "memtrace_inject") || strstr(info->dlpi_name, "cupti"))
    printf("loaded %s\n", info->dlpi_name);
  return 0;
}

int main(int argc, char** argv) {
  if (argc > 1 && !dlopen(argv[1], RTLD_NOW)) fprintf(stderr, "setuid_program: %s\n", dlerror());
  void* p = NULL;
  if (cudaMalloc(&p, 1 << 20) != cudaSuccess || cudaFree(p) != cudaSuccess) {
    fprintf(stderr, "setuid_program: CUDA failed\n");
    return 1;
  }
  dl_iterate_phdr(print_ours, NULL);
  printf("setuid_program: done\n");
  return 0;
}
