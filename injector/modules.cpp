// The modules of the traced process, reported to the collector: all of them when recording
// starts, and any new one as soon as a stack has a frame in it. The collector symbolizes frames
// against these reports, so a library unloaded later still names its frames.
//
// dlopen itself is not interposed: glibc searches the caller's RUNPATH, and we would be the
// caller. dlclose is, only to notice that an address range may now hold something else.
#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "interpose.h"
#include "session.h"
#include "stack_capture.h"

namespace memtrace::inject {
namespace {

struct Range {
  uint64_t start, end;
};

// The executable ranges known now, replaced whole on a rescan so readers need no lock. Old
// lists are kept: a reader may still hold one, and there are few of them.
std::atomic<const std::vector<Range>*> g_ranges{nullptr};
std::atomic<bool> g_rescan{true};
std::mutex g_mutex;
std::set<std::pair<uint64_t, std::string>>* g_reported = nullptr;  // (bias, path)

std::string main_program() {
  char path[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  return n > 0 ? std::string(path, static_cast<size_t>(n)) : std::string();
}

struct Scan {
  std::vector<Range>* ranges;
  bool first = true;
};

int scan_module(dl_phdr_info* info, size_t, void* data) {
  auto* scan = static_cast<Scan*>(data);
  std::string path = info->dlpi_name ? info->dlpi_name : "";
  if (scan->first) path = main_program();  // the first object is the program, which has no name
  scan->first = false;
  if (path.empty() || path[0] != '/') return 0;  // the vDSO: not a file
  bool fresh = g_reported->emplace(info->dlpi_addr, path).second;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD || !(ph.p_flags & PF_X)) continue;
    uint64_t start = info->dlpi_addr + ph.p_vaddr, end = start + ph.p_memsz;
    scan->ranges->push_back(Range{start, end});
    if (fresh) publish_module(info->dlpi_addr, start, end, path);
  }
  return 0;
}

bool known(const std::vector<Range>& ranges, uint64_t address) {
  auto it = std::upper_bound(ranges.begin(), ranges.end(), address,
                             [](uint64_t a, const Range& r) { return a < r.start; });
  return it != ranges.begin() && address < std::prev(it)->end;
}

RealFunction<int (*)(void*)> real_dlclose("dlclose", Library::kRuntime);

}  // namespace

void report_new_modules() {
  std::lock_guard lock(g_mutex);
  if (!g_reported) g_reported = new std::set<std::pair<uint64_t, std::string>>;
  auto* ranges = new std::vector<Range>;
  Scan scan{ranges};
  dl_iterate_phdr(scan_module, &scan);
  std::sort(ranges->begin(), ranges->end(), [](const Range& a, const Range& b) { return a.start < b.start; });
  g_ranges.store(ranges, std::memory_order_release);
  g_rescan.store(false, std::memory_order_relaxed);
  look_for_python_again();
}

void forget_reported_modules() {
  new (&g_mutex) std::mutex;  // a forked child: a thread now gone may have held the lock
  g_reported = nullptr;
  g_rescan.store(true, std::memory_order_relaxed);
}

void ensure_modules_reported(const uint64_t* addresses, int count) {
  const std::vector<Range>* ranges = g_ranges.load(std::memory_order_acquire);
  if (!ranges || g_rescan.load(std::memory_order_relaxed)) {
    report_new_modules();
    return;
  }
  for (int i = 0; i < count; ++i) {
    if (!known(*ranges, addresses[i])) {  // a library loaded since the last scan
      report_new_modules();
      return;
    }
  }
}

}  // namespace memtrace::inject

using namespace memtrace::inject;

MEMTRACE_EXPORT int dlclose(void* handle) {
  auto real = real_dlclose.get();
  int result = real ? real(handle) : -1;
  g_rescan.store(true, std::memory_order_relaxed);  // its range may go to another library
  return result;
}
