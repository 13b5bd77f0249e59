#include "stack_capture.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <unistd.h>
#include <unwind.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "frame_walk.h"
#include "memtrace/ring/environment.h"
#include "memtrace/ring/protocol.h"
#include "session.h"
#include "settings.h"
#include "thread_block.h"

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

// libunwind walks stacks fastest, but its shared library also defines _Unwind_RaiseException,
// _Unwind_Resume and backtrace(). Linked into the injector it would sit in the global scope ahead
// of libgcc_s in every program that does not load libgcc_s itself (python3), and every C++
// exception would be raised by it. So it is loaded privately (RTLD_LOCAL), at load time, before
// the program has threads or locks, and only its own entry points are taken from it.
using Backtrace = int (*)(void**, int);
Backtrace g_unw_backtrace = nullptr;
bool g_own_walk = true;  // memtrace's walk first (frame_walk.h), libunwind for the frames it cannot step

void load_unwinder() {
  const char* socket = setting(env::kSocket);
  const char* native = setting(env::kNativeStacks);
  if (!socket || !*socket || (native && std::strcmp(native, "0") == 0)) return;  // not traced, or no native stacks
  if (g_unw_backtrace) return;
  if (const char* walk = setting(env::kFrameWalk); walk && std::strcmp(walk, "libunwind") == 0) g_own_walk = false;
  // A bundled memtrace carries its own (lib/deps, beside the injector): the machine may have none.
  void* lib = nullptr;
  Dl_info self{};
  if (::dladdr(reinterpret_cast<void*>(&load_unwinder), &self) && self.dli_fname) {
    std::string bundled = self.dli_fname;
    bundled = bundled.substr(0, bundled.rfind('/') + 1) + "deps/libunwind.so.8";
    if (::access(bundled.c_str(), R_OK) == 0) lib = ::dlopen(bundled.c_str(), RTLD_NOW | RTLD_LOCAL);
  }
  if (!lib) lib = ::dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return;  // the toolchain's unwinder serves instead
  using SetCaching = int (*)(void*, int);
  auto set_caching = reinterpret_cast<SetCaching>(::dlsym(lib, "_ULx86_64_set_caching_policy"));
  auto* address_space = static_cast<void**>(::dlsym(lib, "_ULx86_64_local_addr_space"));
  auto backtrace = reinterpret_cast<Backtrace>(::dlsym(lib, "unw_backtrace"));
  // Per-thread caches: the global cache's lock, held by a thread when another forks, would
  // leave the child's first stack walk waiting forever.
  if (!set_caching || !address_space || !backtrace || set_caching(*address_space, 2 /* UNW_CACHE_PER_THREAD */) != 0)
    return;
  g_unw_backtrace = backtrace;
}

// A forked child leaves the frames memtrace's walk cannot step (it takes no lock) to the
// toolchain's unwinder, not libunwind, which keeps locks of its own besides
// the cache's (a child of a program whose other threads were walking stacks at the fork hung in
// _ULx86_64_step, waiting on one), and the child has only the thread that forked.
void use_toolchain_unwinder_in_child() { g_unw_backtrace = nullptr; }

__attribute__((constructor)) void load_unwinder_at_start() {
  load_unwinder();
  ::pthread_atfork(nullptr, nullptr, use_toolchain_unwinder_in_child);
}

// The toolchain's own unwinder (libgcc_s), when libunwind is not installed.
struct GccWalk {
  void** frames;
  int max, count;
};

_Unwind_Reason_Code gcc_frame(_Unwind_Context* context, void* data) {
  auto* walk = static_cast<GccWalk*>(data);
  if (walk->count >= walk->max) return _URC_END_OF_STACK;
  walk->frames[walk->count++] = reinterpret_cast<void*>(_Unwind_GetIP(context));
  return _URC_NO_REASON;
}

// How many of the N frames walked reach STOP's frame (the COUNT-th in its range, included); 0
// when they do not.
int through_stop(void* const* frames, int n, const WalkStop& stop) {
  int seen = 0;
  for (int i = 0; i < n; ++i)
    if (reinterpret_cast<uint64_t>(frames[i]) - stop.start < stop.length && ++seen == stop.count) return i + 1;
  return 0;
}

// Walks at most MAX frames into FRAMES; with STOP, up to its frame where the stack reaches it
// (memtrace's walk ends there by itself; the others walk on, and their frames are cut there).
int walk_stack(void** frames, int max, WalkTail* tail = nullptr, const WalkStop* stop = nullptr) {
  if (g_own_walk) {
    const int n = walk_frames(frames, max, tail, stop);
    if (n >= 0) return n;
  }
  int n = 0;
  if (g_unw_backtrace) {
    n = g_unw_backtrace(frames, max);
  } else {
    GccWalk walk{frames, max, 0};
    _Unwind_Backtrace(gcc_frame, &walk);
    n = walk.count;
  }
  const int through = stop ? through_stop(frames, n, *stop) : 0;
  return through ? through : n;
}

}  // namespace

void prepare_native_stacks() { load_unwinder(); }

bool in_injector(uint64_t address) { return address >= g_self_start && address < g_self_end; }

void capture_stack(const StackOptions& options, uint64_t caller, StackCapture& stack) {
  stack.native_count = 0;
  stack.truncated = false;
  stack.walk_serial = 0;
  stack.walk_shared = 0;
  stack.python_count = 0;
  stack.python_state = ring::kNoPython;
  // Python's frames first where they are read from memory: they tell how far the native walk
  // needs to go. Through the C API they come after it (whether the API may be called depends on
  // the native frames).
  EvalLoops loops;
  const bool python_first = options.python && python_read_directly();
  if (python_first) capture_python(kMaxPythonFrames, options.python_api, stack, options.native ? &loops : nullptr);
  if (options.native && options.depth > 0) {
    // Room for memtrace's own frames on top, which are dropped, plus one to notice truncation:
    // walked into the stack's own array when it has that room (a copy cost ~250 instructions an
    // event), else into one that does.
    constexpr int kRoom = 16 + 1;
    const int wanted = options.depth < kMaxNativeFrames ? options.depth : kMaxNativeFrames;
    void* spare[kMaxNativeFrames + kRoom];
    static_assert(sizeof(void*) == sizeof(uint64_t));
    void** frames = wanted + kRoom <= kMaxNativeFrames ? reinterpret_cast<void**>(stack.native) : spare;
    // Under Python (LOOPS known), the walk ends with the outermost evaluation loop: below it lie
    // the interpreter's start (Py_RunMain, main) or a thread's, while native frames between Python
    // ones (an extension calling back into Python) are kept.
    WalkTail tail;
    const WalkStop stop{loops.start, loops.end - loops.start, loops.count};
    const int n =
        walk_stack(frames, wanted + kRoom, &tail, loops.count > 0 && stack.python_count > 0 ? &stop : nullptr);
    int first = 0;
    while (first < n && in_injector(reinterpret_cast<uint64_t>(frames[first]))) ++first;
    const int kept = n - first < wanted ? n - first : wanted;
    std::memmove(stack.native, frames + first, static_cast<size_t>(kept) * sizeof(uint64_t));
    stack.native_count = static_cast<uint16_t>(kept);
    stack.truncated = n - first > wanted;
    if (!stack.truncated && kept > 0) {
      stack.walk_serial = tail.serial;
      stack.walk_shared = static_cast<uint16_t>(tail.shared < kept ? tail.shared : kept);
    }
  }
  if (stack.native_count == 0 && caller) stack.native[stack.native_count++] = caller;
  if (options.python && !python_first) capture_python(kMaxPythonFrames, options.python_api, stack);
}

}  // namespace memtrace::inject
