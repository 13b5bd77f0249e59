/* A C program that opens a CUDA runtime privately (dlopen, RTLD_LOCAL) and looks up every function
   it calls with dlsym on that handle, as TensorFlow and many wrappers do: no call it makes passes
   through the global scope. With --global, another runtime (libcudart.so.13) is in the global
   scope first, and the private one must still serve every call.
     private_runtime LIBRARY [--device D] [--global] */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int (*SetDevice)(int);
typedef int (*Malloc)(void**, size_t);
typedef int (*Free)(void*);
typedef int (*MallocAsync)(void**, size_t, void*);
typedef int (*FreeAsync)(void*, void*);

static void* need(void* handle, const char* name) {
  void* fn = dlsym(handle, name);
  if (!fn) {
    fprintf(stderr, "private_runtime: no %s: %s\n", name, dlerror());
    exit(2);
  }
  return fn;
}

static void check(int result, const char* what) {
  if (result != 0) {
    fprintf(stderr, "private_runtime: %s failed with %d\n", what, result);
    exit(2);
  }
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: private_runtime LIBRARY [--device D] [--global]\n");
    return 2;
  }
  int device = 0;
  for (int i = 2; i < argc; ++i) {
    if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) device = atoi(argv[++i]);
    if (strcmp(argv[i], "--global") == 0 && !dlopen("libcudart.so.13", RTLD_NOW | RTLD_GLOBAL)) {
      fprintf(stderr, "private_runtime: %s\n", dlerror());
      return 2;
    }
  }
  void* runtime = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!runtime) {
    fprintf(stderr, "private_runtime: %s\n", dlerror());
    return 2;
  }
  SetDevice set_device = (SetDevice)need(runtime, "cudaSetDevice");
  Malloc cuda_malloc = (Malloc)need(runtime, "cudaMalloc");
  Free cuda_free = (Free)need(runtime, "cudaFree");
  MallocAsync malloc_async = (MallocAsync)need(runtime, "cudaMallocAsync");
  FreeAsync free_async = (FreeAsync)need(runtime, "cudaFreeAsync");

  check(set_device(device), "cudaSetDevice");
  const int rounds = 20;
  long long peak = 0;
  for (int i = 0; i < rounds; ++i) {
    void *p = NULL, *q = NULL;
    size_t bytes = (size_t)(i + 1) << 20;
    check(cuda_malloc(&p, bytes), "cudaMalloc");
    check(malloc_async(&q, bytes, NULL), "cudaMallocAsync");
    if ((long long)(2 * bytes) > peak) peak = (long long)(2 * bytes);
    check(free_async(q, NULL), "cudaFreeAsync");
    check(cuda_free(p), "cudaFree");
  }
  void* kept = NULL;
  check(cuda_malloc(&kept, 7 << 20), "cudaMalloc"); /* left allocated */
  if (peak < (7 << 20)) peak = 7 << 20;
  printf(
      "memtrace-sample: {\"pid\":%d,\"calls\":{\"cudaMalloc\":%d,\"cudaFree\":%d,\"cudaMallocAsync\":%d,"
      "\"cudaFreeAsync\":%d},\"failed\":{},\"peak_bytes\":{\"%d\":%lld},\"live_at_exit_bytes\":{\"%d\":%d}}\n",
      (int)getpid(), rounds + 1, rounds, rounds, rounds, device, peak, device, 7 << 20);
  return 0;
}
