#include "stack_capture.h"

#include <link.h>

#define UNW_LOCAL_ONLY
#include <libunwind.h>

#include "memtrace/ring.h"
#include "session.h"

namespace memtrace::inject {
namespace {

uint64_t g_self_start = 0, g_self_end = 0;

// Finds this library's executable segment once, at load time.
__attribute__((constructor)) void find_self() {
  const auto self = reinterpret_cast<uint64_t>(&find_self);
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        uint64_t self = *static_cast<uint64_t*>(data);
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_LOAD || !(ph.p_flags & PF_X)) continue;
          uint64_t start = info->dlpi_addr + ph.p_vaddr, end = start + ph.p_memsz;
          if (self >= start && self < end) {
            g_self_start = start;
            g_self_end = end;
            return 1;
          }
        }
        return 0;
      },
      const_cast<uint64_t*>(&self));
}

}  // namespace

bool in_injector(uint64_t address) { return address >= g_self_start && address < g_self_end; }

void capture_stack(const StackOptions& options, uint64_t caller, StackCapture& stack) {
  stack.native_count = 0;
  stack.truncated = false;
  if (options.native && options.depth > 0) {
    // Room for memtrace's own frames on top, which are dropped, plus one to notice truncation.
    void* frames[kMaxNativeFrames + 16];
    int wanted = options.depth < kMaxNativeFrames ? options.depth : kMaxNativeFrames;
    int n = unw_backtrace(frames, wanted + 16 + 1);
    int first = 0;
    while (first < n && in_injector(reinterpret_cast<uint64_t>(frames[first]))) ++first;
    for (int i = first; i < n && stack.native_count < wanted; ++i)
      stack.native[stack.native_count++] = reinterpret_cast<uint64_t>(frames[i]);
    stack.truncated = n - first > wanted;
    ensure_modules_reported(stack.native, stack.native_count);
  }
  if (stack.native_count == 0 && caller) stack.native[stack.native_count++] = caller;
  stack.python_count = 0;
  stack.python_state = ring::kNoPython;
  if (options.python) capture_python(kMaxPythonFrames, stack);
}

}  // namespace memtrace::inject
