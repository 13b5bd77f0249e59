#include "settings.h"

#include <sys/auxv.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace memtrace::inject {
namespace {

constexpr size_t kBytes = 8192, kMax = 32;
struct List {
  char text[kBytes];
  const char* names[kMax];
  const char* values[kMax];
  size_t count = 0;
};
// Each attach's list is a new one, never changed once published: a thread may still hold a value
// of the last (a few KiB an attach stay behind).
std::atomic<const List*> g_list{nullptr};

}  // namespace

bool secure_program() {
  static const bool secure = ::getauxval(AT_SECURE) != 0;
  return secure;
}

// Said once, as the injector loads: a set-user-ID or set-group-ID program runs with rights its
// user does not have, and its environment is its user's. Nothing of that environment is taken
// (no collector, no CUPTI, no library named), nothing recorded.
__attribute__((constructor)) void say_secure_program_is_not_recorded() {
  if (!secure_program()) return;
  static const char text[] =
      "memtrace: not recording this program: it runs set-user-ID or set-group-ID (AT_SECURE), and memtrace "
      "neither records nor loads anything into such a program\n";
  [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, text, sizeof text - 1);
}

const char* setting(const char* name) {
  if (secure_program()) return nullptr;
  if (const List* list = g_list.load(std::memory_order_acquire))
    for (size_t i = 0; i < list->count; ++i)
      if (std::strcmp(list->names[i], name) == 0) return list->values[i];
  return std::getenv(name);
}

bool attach_settings_given() { return g_list.load(std::memory_order_acquire) != nullptr; }

bool set_attach_settings(const char* text) {
  size_t length = std::strlen(text);
  if (length >= kBytes) return false;
  auto* list = new List;
  std::memcpy(list->text, text, length + 1);
  for (char* line = list->text; *line && list->count < kMax;) {
    char* end = std::strchr(line, '\n');
    if (end) *end = '\0';
    if (char* equals = std::strchr(line, '=')) {
      *equals = '\0';
      list->names[list->count] = line;
      list->values[list->count] = equals + 1;
      ++list->count;
    }
    if (!end) break;
    line = end + 1;
  }
  g_list.store(list, std::memory_order_release);
  return true;
}

}  // namespace memtrace::inject
