// dl_iterate_phdr, held across fork. glibc (2.36, Debian 12) does not reset its loader's write
// lock in a forked child: a thread inside dl_iterate_phdr at the fork leaves the child's first
// dl_iterate_phdr, or dlopen, waiting forever. memtrace's threads go there often: libunwind finds
// each new frame's unwind table through it (memtrace's stack walks), and memtrace scans the loaded
// modules through it. So every call, memtrace's and (preloaded, this definition comes first) the
// program's and libunwind's, holds a read lock that fork takes for writing: a fork waits until
// no thread is inside, and its child finds the loader free.
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>

#include "interpose.h"

namespace {

using IteratePhdr = int (*)(int (*)(dl_phdr_info*, size_t, void*), void*);

pthread_rwlock_t g_inside = PTHREAD_RWLOCK_INITIALIZER;  // readers: the threads inside dl_iterate_phdr

IteratePhdr real_iterate_phdr() {
  static IteratePhdr real = reinterpret_cast<IteratePhdr>(::dlsym(RTLD_NEXT, "dl_iterate_phdr"));
  return real;
}

// Registered before memtrace's other fork handlers, so that its prepare runs after theirs: fork
// takes memtrace's own locks first, then waits for the loader (a thread inside dl_iterate_phdr
// needs none of them), never the other way round.
__attribute__((constructor(101))) void hold_loader_across_fork() {
  real_iterate_phdr();  // resolved now, not inside a fork
  // The child is made anew: its thread has another id than the writer's, which unlock checks.
  ::pthread_atfork([] { ::pthread_rwlock_wrlock(&g_inside); }, [] { ::pthread_rwlock_unlock(&g_inside); },
                   [] { ::pthread_rwlock_init(&g_inside, nullptr); });
}

}  // namespace

MEMTRACE_EXPORT int dl_iterate_phdr(int (*callback)(dl_phdr_info*, size_t, void*), void* data) {
  IteratePhdr real = real_iterate_phdr();
  if (!real) return 0;
  // Read locks nest (glibc's default prefers readers): a callback may call it again.
  ::pthread_rwlock_rdlock(&g_inside);
  int result = real(callback, data);
  ::pthread_rwlock_unlock(&g_inside);
  return result;
}
