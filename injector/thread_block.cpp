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

// Made when the library is loaded (before any fork it could be caught in the middle of).
pthread_key_t g_exit_key;
bool g_exit_key_made = false;

// At the thread's exit. A block used again after it (a later destructor's CUDA call) is mapped
// anew and registers this again, which glibc then runs again (PTHREAD_DESTRUCTOR_ITERATIONS).
void unmap_blocks(void*) {
  for (size_t i = 0; i < kBlocks; ++i) {
    if (t_blocks.at[i]) ::munmap(t_blocks.at[i], t_blocks.bytes[i]);
    t_blocks.at[i] = nullptr;
  }
}

__attribute__((constructor)) void make_exit_key() {
  g_exit_key_made = ::pthread_key_create(&g_exit_key, unmap_blocks) == 0;
}

}  // namespace

void* thread_block(ThreadBlock which, size_t bytes) {
  const size_t i = static_cast<size_t>(which);
  if (void* block = t_blocks.at[i]) return block;
  void* block = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (block == MAP_FAILED) return nullptr;
  if (g_exit_key_made) ::pthread_setspecific(g_exit_key, &t_blocks);  // any non-null value: the destructor runs
  t_blocks.at[i] = block;
  t_blocks.bytes[i] = bytes;
  return block;
}

}  // namespace memtrace::inject
