#include "ledger.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "device_model.h"
#include "pid_path.h"

namespace sim {
namespace {

constexpr size_t kLineBytes = 128;
constexpr size_t kApiLines = 64;
constexpr size_t kDeviceLines = 64;
constexpr size_t kFileBytes = (1 + kApiLines + kDeviceLines) * kLineBytes;

struct ApiCounts {
  const char* name = nullptr;
  uint64_t calls = 0, failed = 0, bytes = 0;
};

struct Ledger {
  std::mutex mutex;
  bool tried_open = false;
  char* map = nullptr;  // the file, or null when there is no ledger
  ApiCounts apis[kApiLines];
};

Ledger& ledger() {
  static Ledger* l = new Ledger;  // never destroyed: static destructors may still allocate
  return *l;
}

thread_local int t_depth = 0;

void write_line(char* map, size_t index, const char* text) {
  char line[kLineBytes];
  std::memset(line, ' ', kLineBytes);
  size_t n = std::strlen(text);
  std::memcpy(line, text, n < kLineBytes - 1 ? n : kLineBytes - 1);
  line[kLineBytes - 1] = '\n';
  std::memcpy(map + index * kLineBytes, line, kLineBytes);
}

// Called with the mutex held.
char* open_ledger(Ledger& l) {
  if (l.tried_open) return l.map;
  l.tried_open = true;
  std::string path = path_from_environment("MEMTRACE_SIM_LEDGER");
  if (path.empty()) return nullptr;
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    std::fprintf(stderr, "simulated CUDA device: cannot open ledger %s\n", path.c_str());
    return nullptr;
  }
  void* map = MAP_FAILED;
  if (::ftruncate(fd, kFileBytes) == 0) map = ::mmap(nullptr, kFileBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) return nullptr;
  l.map = static_cast<char*>(map);
  std::memset(l.map, ' ', kFileBytes);
  for (size_t i = 0; i < kFileBytes / kLineBytes; ++i) l.map[i * kLineBytes + kLineBytes - 1] = '\n';
  char header[kLineBytes];
  std::snprintf(header, sizeof header, "# memtrace simulated device ledger, pid %d", static_cast<int>(::getpid()));
  write_line(l.map, 0, header);
  return l.map;
}

// A forked child has a device of its own: its ledger starts empty, in its own file when the
// path has %p (without %p it writes none, rather than overwrite its parent's).
void reset_after_fork() {
  Ledger& l = ledger();
  new (&l.mutex) std::mutex;
  if (l.map) ::munmap(l.map, kFileBytes);
  l.map = nullptr;
  const char* pattern = ::secure_getenv("MEMTRACE_SIM_LEDGER");
  l.tried_open = !(pattern && std::strstr(pattern, "%p"));
  for (auto& a : l.apis) a = ApiCounts();
}

__attribute__((constructor)) void install_fork_handler() { ::pthread_atfork(nullptr, nullptr, reset_after_fork); }

}  // namespace

void ledger_device_changed(int device, uint64_t live, uint64_t peak) {
  if (device < 0 || static_cast<size_t>(device) >= kDeviceLines) return;
  Ledger& l = ledger();
  std::lock_guard lock(l.mutex);
  char* map = open_ledger(l);
  if (!map) return;
  char text[kLineBytes];
  std::snprintf(text, sizeof text, "device %d live %llu peak %llu", device, static_cast<unsigned long long>(live),
                static_cast<unsigned long long>(peak));
  write_line(map, 1 + kApiLines + static_cast<size_t>(device), text);
}

}  // namespace sim

extern "C" int memtrace_sim_enter(void) { return sim::t_depth++ == 0; }

extern "C" void memtrace_sim_leave(int outermost, const char* api, int result, uint64_t bytes, int counted) {
  --sim::t_depth;
  if (!outermost || !counted) return;
  sim::Ledger& l = sim::ledger();
  std::lock_guard lock(l.mutex);
  size_t i = 0;
  while (i < sim::kApiLines && l.apis[i].name && std::strcmp(l.apis[i].name, api) != 0) ++i;
  if (i == sim::kApiLines) return;
  sim::ApiCounts& c = l.apis[i];
  c.name = api;
  c.calls += 1;
  c.failed += result != 0;
  c.bytes += bytes;
  if (char* map = sim::open_ledger(l)) {
    char text[sim::kLineBytes];
    std::snprintf(text, sizeof text, "api %s calls %llu failed %llu bytes %llu", api,
                  static_cast<unsigned long long>(c.calls), static_cast<unsigned long long>(c.failed),
                  static_cast<unsigned long long>(c.bytes));
    sim::write_line(map, 1 + i, text);
  }
}
