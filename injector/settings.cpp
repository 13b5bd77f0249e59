#include "settings.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace memtrace::inject {
namespace {

constexpr size_t kBytes = 8192, kMax = 32;
char g_text[kBytes];
const char* g_names[kMax];
const char* g_values[kMax];
// Written only while no recording runs (before attach starts one), read by every thread after.
std::atomic<size_t> g_count{0};

}  // namespace

const char* setting(const char* name) {
  size_t count = g_count.load(std::memory_order_acquire);
  for (size_t i = 0; i < count; ++i)
    if (std::strcmp(g_names[i], name) == 0) return g_values[i];
  return std::getenv(name);
}

bool set_attach_settings(const char* text) {
  size_t length = std::strlen(text);
  if (length >= kBytes) return false;
  g_count.store(0, std::memory_order_release);
  std::memcpy(g_text, text, length + 1);
  size_t count = 0;
  for (char* line = g_text; *line && count < kMax;) {
    char* end = std::strchr(line, '\n');
    if (end) *end = '\0';
    if (char* equals = std::strchr(line, '=')) {
      *equals = '\0';
      g_names[count] = line;
      g_values[count] = equals + 1;
      ++count;
    }
    if (!end) break;
    line = end + 1;
  }
  g_count.store(count, std::memory_order_release);
  return true;
}

}  // namespace memtrace::inject
