#include "driver_requests.h"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "pid_path.h"

namespace sim {
namespace {

// The log's descriptor: -1 when there is none, -2 until the environment was read.
std::atomic<int> g_fd{-2};

int log_fd() {
  int fd = g_fd.load(std::memory_order_acquire);
  if (fd != -2) return fd;
  const std::string path = path_from_environment("MEMTRACE_SIM_DRIVER_REQUESTS");
  fd = path.empty() ? -1 : ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  int expected = -2;
  if (!g_fd.compare_exchange_strong(expected, fd) && fd >= 0) {
    ::close(fd);  // another thread opened it first
    fd = expected;
  }
  return fd;
}

// A forked child writes its own log where the name has the pid in it (and none of its parent's).
void reopen_in_child() {
  const char* pattern = ::secure_getenv("MEMTRACE_SIM_DRIVER_REQUESTS");
  if (!pattern || !std::strstr(pattern, "%p")) return;
  const int fd = g_fd.exchange(-2);
  if (fd >= 0) ::close(fd);
}
__attribute__((constructor)) void install_fork_handler() { ::pthread_atfork(nullptr, nullptr, reopen_in_child); }

void write_line(const char* line, int length) {
  const int fd = log_fd();
  if (fd >= 0 && length > 0) (void)!::write(fd, line, static_cast<size_t>(length));
}

}  // namespace

void log_lookup(const char* name, int version, unsigned long long flags, bool found) {
  if (log_fd() < 0) return;
  char line[256];
  write_line(line, std::snprintf(line, sizeof line, "lookup %s %d 0x%llx %s\n", name ? name : "(null)", version, flags,
                                 found ? "found" : "missing"));
}

void log_export_table(const CUuuid* id, bool found) {
  if (log_fd() < 0) return;
  char hex[33] = "(null)";
  if (id)
    for (int i = 0; i < 16; ++i) std::snprintf(hex + 2 * i, 3, "%02x", static_cast<unsigned char>(id->bytes[i]));
  char line[96];
  write_line(line, std::snprintf(line, sizeof line, "export-table %s %s\n", hex, found ? "found" : "missing"));
}

void log_call(const char* name) {
  if (log_fd() < 0) return;
  char line[128];
  write_line(line, std::snprintf(line, sizeof line, "call %s\n", name));
}

}  // namespace sim
