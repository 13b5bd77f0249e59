// Preloaded after memtrace's injector by a test: counts the scans of every loaded module
// (dl_iterate_phdr) the injector makes, and writes the count at exit to $SCAN_COUNT_DIR/<pid>.
// The injector is looked for in the caller's first frames, not only the immediate caller: a
// sanitizer's runtime, preloaded first, intercepts dl_iterate_phdr in between, and the injector's
// own dl_iterate_phdr (loader_guard.cpp) passes every call of the process on: frames of a
// function named dl_iterate_phdr are passed over.
#include <dlfcn.h>
#include <execinfo.h>
#include <link.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {
std::atomic<long> g_scans{0};

__attribute__((destructor)) void write_count() {
  const char* dir = std::getenv("SCAN_COUNT_DIR");
  if (!dir) return;
  std::string path = std::string(dir) + "/" + std::to_string(::getpid());
  if (std::FILE* f = std::fopen(path.c_str(), "w")) {
    std::fprintf(f, "%ld\n", g_scans.load());
    std::fclose(f);
  }
}
}  // namespace

extern "C" __attribute__((visibility("default"))) int dl_iterate_phdr(int (*callback)(dl_phdr_info*, size_t, void*),
                                                                      void* data) {
  using Real = int (*)(int (*)(dl_phdr_info*, size_t, void*), void*);
  static Real real = reinterpret_cast<Real>(::dlsym(RTLD_NEXT, "dl_iterate_phdr"));
  static thread_local bool inside = false;  // backtrace may scan the modules itself
  if (!inside) {
    inside = true;
    void* frames[6];
    int n = ::backtrace(frames, 6);
    for (int i = 1; i < n; ++i) {
      Dl_info info{};
      if (!::dladdr(frames[i], &info)) continue;
      if (info.dli_sname && std::strstr(info.dli_sname, "dl_iterate_phdr")) continue;
      if (info.dli_fname && std::strstr(info.dli_fname, "libmemtrace_inject")) {
        g_scans.fetch_add(1, std::memory_order_relaxed);
        break;
      }
    }
    inside = false;
  }
  return real(callback, data);
}
