// The modules of the traced process, reported to the collector: all of them when recording
// starts, and any new one as soon as a stack has a frame in it. The collector symbolizes frames
// against these reports, so a library unloaded later still names its frames.
//
// The loader counts every load and unload (dl_iterate_phdr's dlpi_adds and dlpi_subs): modules
// are scanned again only when those counts moved, never for a frame that lies in no module (JIT
// code, an anonymous mapping), so such frames cost one cheap check, not a scan per allocation.
//
// dlopen itself is not interposed: glibc searches the caller's RUNPATH, and we would be the
// caller. dlclose is, only to notice that an address range may now hold something else.
#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "frame_walk.h"
#include "interpose.h"
#include "session.h"
#include "stack_capture.h"

namespace memtrace::inject {
namespace {

struct Range {
  uint64_t start, end;
};

// The executable ranges known now, replaced whole on a rescan so readers need no lock. Old lists
// are kept (a reader may still hold one); there is one per change of the loaded modules.
std::atomic<const std::vector<Range>*> g_ranges{nullptr};
// The loader's counts of loads and unloads when the modules were last scanned.
std::atomic<uint64_t> g_scanned_adds{0}, g_scanned_subs{0};
// Set by dlclose when a module went away: a known range may now belong to another module.
std::atomic<bool> g_unloaded{false};
std::mutex g_mutex;
std::set<std::pair<uint64_t, std::string>>* g_reported = nullptr;  // (bias, path)

std::string main_program() {
  char path[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  return n > 0 ? std::string(path, static_cast<size_t>(n)) : std::string();
}

// The file mapped at ADDRESS, from /proc/self/maps: for a module the loader knows only by a
// relative name (dlopen("./x.so"), ctypes.CDLL("./x.so")), which the collector could not open
// from its own folder, and which the program's later chdir would make wrong.
std::string mapped_file(uint64_t address) {
  std::FILE* maps = std::fopen("/proc/self/maps", "re");
  if (!maps) return {};
  char line[PATH_MAX + 128];
  std::string path;
  while (std::fgets(line, sizeof line, maps)) {
    unsigned long long start = 0, end = 0;
    int name_at = 0;
    if (std::sscanf(line, "%llx-%llx %*s %*s %*s %*s %n", &start, &end, &name_at) < 2 || name_at == 0) continue;
    if (address < start || address >= end) continue;
    path = line + name_at;
    while (!path.empty() && (path.back() == '\n' || path.back() == ' ')) path.pop_back();
    break;
  }
  std::fclose(maps);
  return !path.empty() && path[0] == '/' ? path : std::string();
}

struct Counts {
  uint64_t adds = 0, subs = 0;
};

Counts loader_counts() {
  Counts counts;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t size, void* data) {
        if (size >= offsetof(dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
          static_cast<Counts*>(data)->adds = info->dlpi_adds;
          static_cast<Counts*>(data)->subs = info->dlpi_subs;
        }
        return 1;  // the counts come with the first module
      },
      &counts);
  return counts;
}

struct Module {
  uint64_t bias, start, end;
  std::string path;
};

struct Scan {
  std::vector<Range>* ranges;
  std::vector<Module> fresh;  // not reported yet: published once the loader's lock is let go
  bool first = true;
  Counts counts;
};

int scan_module(dl_phdr_info* info, size_t, void* data) {
  auto* scan = static_cast<Scan*>(data);
  if (scan->first) scan->counts = Counts{info->dlpi_adds, info->dlpi_subs};
  std::string path = info->dlpi_name ? info->dlpi_name : "";
  if (scan->first) path = main_program();  // the first object is the program, which has no name
  scan->first = false;
  const ElfW(Phdr)* phdrs = info->dlpi_phdr;
  auto executable = [&](int i) { return phdrs[i].p_type == PT_LOAD && (phdrs[i].p_flags & PF_X); };
  if (!path.empty() && path[0] != '/') {
    for (int i = 0; i < info->dlpi_phnum; ++i)
      if (executable(i)) {
        path = mapped_file(info->dlpi_addr + phdrs[i].p_vaddr);
        break;
      }
  }
  // A module without a file (the vDSO) is known, so its frames cause no rescan, but not reported.
  bool fresh = !path.empty() && path[0] == '/' && g_reported->emplace(info->dlpi_addr, path).second;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    if (!executable(i)) continue;
    uint64_t start = info->dlpi_addr + phdrs[i].p_vaddr, end = start + phdrs[i].p_memsz;
    scan->ranges->push_back(Range{start, end});
    if (fresh) scan->fresh.push_back(Module{info->dlpi_addr, start, end, path});
  }
  return 0;
}

// The range holding ADDRESS, if any.
const Range* known(const std::vector<Range>& ranges, uint64_t address) {
  auto it =
      std::upper_bound(ranges.begin(), ranges.end(), address, [](uint64_t a, const Range& r) { return a < r.start; });
  return it != ranges.begin() && address < std::prev(it)->end ? &*std::prev(it) : nullptr;
}

}  // namespace

void report_new_modules() {
  std::lock_guard lock(g_mutex);
  if (!g_reported) g_reported = new std::set<std::pair<uint64_t, std::string>>;
  g_unloaded.store(false, std::memory_order_relaxed);
  auto* ranges = new std::vector<Range>;
  Scan scan{ranges, {}, true, {}};
  dl_iterate_phdr(scan_module, &scan);
  // Published outside dl_iterate_phdr: a full ring may keep this thread waiting, and the loader's
  // lock held meanwhile would stop every thread that unwinds (exceptions, memtrace's own stack
  // walks) or loads a library. Still under g_mutex, and before the new ranges are seen: no thread
  // publishes a frame in a module before the module's record.
  for (const Module& m : scan.fresh) publish_module(m.bias, m.start, m.end, m.path);
  std::sort(ranges->begin(), ranges->end(), [](const Range& a, const Range& b) { return a.start < b.start; });
  g_ranges.store(ranges, std::memory_order_release);
  g_scanned_adds.store(scan.counts.adds, std::memory_order_relaxed);
  g_scanned_subs.store(scan.counts.subs, std::memory_order_relaxed);
  look_for_python_again();
}

void forget_reported_modules() {
  new (&g_mutex) std::mutex;  // a forked child: a thread now gone may have held the lock
  g_reported = nullptr;
  g_ranges.store(nullptr, std::memory_order_relaxed);
}

// The stack this thread last found every module of, as a hash of its addresses, and the list of
// ranges it was found in: a loop allocating from one place asks about the same stack each time
// (callgrind: ~500 instructions an event for 25 frames in seven modules, ~100 this way). A list is
// never freed or reused, so a rescan or a fork (which drops the list) makes the memo stale.
namespace {
thread_local uint64_t t_known_stack = 0;
thread_local const void* t_known_in = nullptr;
}  // namespace

void ensure_modules_reported(const uint64_t* addresses, int count) {
  const std::vector<Range>* ranges = g_ranges.load(std::memory_order_acquire);
  bool rescan = !ranges || g_unloaded.load(std::memory_order_relaxed);
  uint64_t hash = static_cast<uint64_t>(count);
  for (int i = 0; i < count; ++i) hash = (hash ^ addresses[i]) * 0x9E3779B97F4A7C15ull;
  if (!rescan && ranges == t_known_in && hash == t_known_stack) return;
  const Range* last = nullptr;  // neighbouring frames are mostly in one module: tried first
  for (int i = 0; i < count && !rescan; ++i) {
    if (last && addresses[i] >= last->start && addresses[i] < last->end) continue;
    last = known(*ranges, addresses[i]);
    rescan = !last;
  }
  if (!rescan) {
    t_known_stack = hash;
    t_known_in = ranges;
    return;
  }
  // An unknown frame: a module loaded since the last scan, or code outside any module.
  if (ranges && !g_unloaded.load(std::memory_order_relaxed)) {
    Counts now = loader_counts();
    if (now.adds == g_scanned_adds.load(std::memory_order_relaxed) &&
        now.subs == g_scanned_subs.load(std::memory_order_relaxed))
      return;
  }
  report_new_modules();
}

}  // namespace memtrace::inject

using namespace memtrace::inject;

// The module counts around the real call say whether it unloaded anything (most dlclose calls
// only drop a reference).
MEMTRACE_EXPORT int dlclose(void* handle) {
  static auto real = reinterpret_cast<int (*)(void*)>(::dlsym(RTLD_NEXT, "dlclose"));
  uint64_t before = loader_counts().subs;
  int result = real ? real(handle) : -1;
  if (loader_counts().subs != before) {
    g_unloaded.store(true, std::memory_order_relaxed);
    g_modules_unloaded.fetch_add(1, std::memory_order_release);
    forget_frame_rules();
  }
  return result;
}
