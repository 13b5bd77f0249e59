#include "thread_block.h"

#include <pthread.h>
#include <sys/mman.h>

namespace memtrace::inject {
namespace {

constexpr size_t kBlocks = static_cast<size_t>(ThreadBlock::kCount);
struct Blocks {
  void* at[kBlocks];
  size_t bytes[kBlocks];
};
thread_local Blocks t_blocks __attribute__((tls_model("initial-exec")));

pthread_key_t g_exit_key;
pthread_once_t g_exit_key_once = PTHREAD_ONCE_INIT;

// At the thread's exit. A block used again after it (a later destructor's CUDA call) is mapped
// anew and registers this again, which glibc then runs again (PTHREAD_DESTRUCTOR_ITERATIONS).
void unmap_blocks(void*) {
  for (size_t i = 0; i < kBlocks; ++i) {
    if (t_blocks.at[i]) ::munmap(t_blocks.at[i], t_blocks.bytes[i]);
    t_blocks.at[i] = nullptr;
  }
}

}  // namespace

void* thread_block(ThreadBlock which, size_t bytes) {
  const size_t i = static_cast<size_t>(which);
  if (void* block = t_blocks.at[i]) return block;
  void* block = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (block == MAP_FAILED) return nullptr;
  ::pthread_once(&g_exit_key_once, [] { ::pthread_key_create(&g_exit_key, unmap_blocks); });
  ::pthread_setspecific(g_exit_key, &t_blocks);  // any non-null value: the destructor runs
  t_blocks.at[i] = block;
  t_blocks.bytes[i] = bytes;
  return block;
}

}  // namespace memtrace::inject
