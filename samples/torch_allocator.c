/* Allocators for PyTorch's CUDAPluggableAllocator (torch.cuda.memory.CUDAPluggableAllocator(path,
 * alloc, free)), with the signatures PyTorch calls: alloc(size, device, stream) and free(ptr, size,
 * device, stream).
 *   direct_alloc/direct_free: one cudaMalloc per allocation, as PyTorch's documentation's example
 *     allocator does (docs/source/notes/cuda.rst, "Using custom memory allocators for CUDA");
 *   arena_alloc/arena_free: sub-allocations of one 256 MiB cudaMalloc made at the first call, as
 *     allocators that pre-reserve their memory do (the segments PyTorch then reports follow no
 *     cudaMalloc of theirs). */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

void* direct_alloc(size_t size, int device, void* stream) {
  (void)device, (void)stream;
  void* ptr = NULL;
  return cudaMalloc(&ptr, size) == cudaSuccess ? ptr : NULL;
}

void direct_free(void* ptr, size_t size, int device, void* stream) {
  (void)size, (void)device, (void)stream;
  cudaFree(ptr);
}

/* The arena: first fit over a list of free ranges, 2 MiB-aligned offsets. */
enum { kArenaBytes = 256 << 20, kAlign = 2 << 20, kMaxRanges = 256 };
static pthread_mutex_t arena_lock = PTHREAD_MUTEX_INITIALIZER;
static char* arena;
static struct Range { size_t start, size; } free_ranges[kMaxRanges];
static int free_count;

void* arena_alloc(size_t size, int device, void* stream) {
  (void)device, (void)stream;
  size = (size + kAlign - 1) / kAlign * kAlign;
  void* out = NULL;
  pthread_mutex_lock(&arena_lock);
  if (!arena && cudaMalloc((void**)&arena, kArenaBytes) == cudaSuccess) {
    free_ranges[0].start = 0;
    free_ranges[0].size = kArenaBytes;
    free_count = 1;
  }
  for (int i = 0; i < free_count && !out; ++i)
    if (free_ranges[i].size >= size) {
      out = arena + free_ranges[i].start;
      free_ranges[i].start += size;
      free_ranges[i].size -= size;
    }
  pthread_mutex_unlock(&arena_lock);
  return out;
}

void arena_free(void* ptr, size_t size, int device, void* stream) {
  (void)device, (void)stream;
  size = (size + kAlign - 1) / kAlign * kAlign;
  pthread_mutex_lock(&arena_lock);
  if (free_count < kMaxRanges) {
    free_ranges[free_count].start = (size_t)((char*)ptr - arena);
    free_ranges[free_count].size = size;
    ++free_count;
  }
  pthread_mutex_unlock(&arena_lock);
}
