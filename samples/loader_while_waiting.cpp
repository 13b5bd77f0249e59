// A thread allocates from a library it has just loaded while the ring is full (memtrace's
// collector stopped, or behind): memtrace must tell the collector of the new module before the
// allocation's record, and waits for room to do it. The rest of the program must go on
// meanwhile: what a C++ runtime, an unwinder or a lazy library load does through the loader
// (dl_iterate_phdr here) must not wait for memtrace's collector.
//   loader_while_waiting READY GO FREE PLUGIN
// Allocates once and creates the file READY; waits for the file GO (the test stops memtrace
// first); fills the ring from one thread until it waits for room; then a second thread loads
// PLUGIN (libplugin_alloc.so) and allocates through it, waiting for room to report the module;
// then the main thread walks the loaded modules and creates FREE. Once memtrace runs again,
// everything is recorded and it exits 0.
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <link.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "sample_account.h"

namespace {

std::atomic<bool> g_stop{false};
std::atomic<pid_t> g_filler{0}, g_loader{0};

bool exists(const char* path) { return ::access(path, F_OK) == 0; }

void touch(const char* path) { std::ofstream(path) << "1\n"; }

void wait_for_file(const char* path) {
  while (!exists(path)) ::usleep(1000);
}

// Whether thread TID sleeps in clock_nanosleep: memtrace's producer waiting for ring room (it
// sleeps 100 us at a time; nothing else in these threads sleeps, and with memtrace stopped no
// room comes: once seen there, it stays).
bool waits_for_room(pid_t tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/syscall");
  long number = -1;
  return in >> number && number == SYS_clock_nanosleep;
}

void wait_until_waiting(const std::atomic<pid_t>& tid) {
  while (tid.load() == 0 || !waits_for_room(tid.load())) ::usleep(1000);
}

void fill_the_ring() {
  g_filler = static_cast<pid_t>(::syscall(SYS_gettid));
  while (!g_stop.load()) {
    void* p = nullptr;
    SAMPLE_CHECK(cudaMalloc(&p, 4096));
    SAMPLE_CHECK(cudaFree(p));
  }
}

void allocate_from_plugin(const char* plugin) {
  g_loader = static_cast<pid_t>(::syscall(SYS_gettid));
  void* library = ::dlopen(plugin, RTLD_NOW);
  if (!library) {
    std::fprintf(stderr, "loader_while_waiting: %s\n", ::dlerror());
    std::_Exit(3);
  }
  auto allocate = reinterpret_cast<void* (*)(size_t)>(::dlsym(library, "plugin_allocate"));
  void* p = allocate ? allocate(8192) : nullptr;
  SAMPLE_CHECK(p ? cudaSuccess : cudaErrorMemoryAllocation);
  SAMPLE_CHECK(cudaFree(p));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: loader_while_waiting READY GO FREE PLUGIN\n");
    return 2;
  }
  void* first = nullptr;
  SAMPLE_CHECK(cudaMalloc(&first, 4096));
  SAMPLE_CHECK(cudaFree(first));
  touch(argv[1]);
  wait_for_file(argv[2]);

  std::thread filler(fill_the_ring);
  wait_until_waiting(g_filler);
  std::thread loader(allocate_from_plugin, argv[4]);
  wait_until_waiting(g_loader);
  long modules = 0;
  dl_iterate_phdr(
      [](dl_phdr_info*, size_t, void* count) {
        ++*static_cast<long*>(count);
        return 0;
      },
      &modules);
  std::printf("modules %ld\n", modules);
  touch(argv[3]);

  g_stop = true;
  loader.join();
  filler.join();
  return 0;
}
