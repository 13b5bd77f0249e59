// memtrace attach: the injector loaded into a process that is already running, by `memtrace attach`
// (collector/attach/) through ptrace: it stops one thread at a moment that thread holds none of the C
// library's locks, makes it call dlopen and then memtrace_attach, and lets it go. memtrace_attach
// only takes its settings and starts a thread of memtrace's own; everything else (connecting to
// the collector, CUPTI, the device layer, Python and PyTorch) happens on that thread, never on one
// the program was using (it may hold the loader's, malloc's or PyTorch's allocator's lock).
//
// The thread tells memtrace attach how it went on a socket of attach's ("started", or "failed
// WHY"), then waits on it: "stop", or the socket closing (memtrace attach ended), ends the
// recording (CUPTI let go, the session ended) and the thread. The library stays loaded (-z
// nodelete): a later attach finds it and starts a new session.
#include <dlfcn.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>

#include "backend.h"
#include "interpose.h"
#include "memtrace/ring/environment.h"
#include "memtrace/ring/protocol.h"
#include "memtrace/ring/python_lines.h"
#include "real_function.h"
#include "session.h"
#include "settings.h"
#include "stack_capture.h"

using namespace memtrace;
using namespace memtrace::inject;

namespace {

// Settings of attach's own (beside ring/environment.h's): its socket and the Python shim's folder.
constexpr const char* kAttachSocket = "MEMTRACE_ATTACH_SOCKET";
constexpr const char* kShimFolder = "MEMTRACE_SHIM_FOLDER";

std::atomic<bool> g_attached{false};  // memtrace_attach's thread runs (not in a forked child)
__attribute__((constructor)) void forget_attach_in_child() {
  ::pthread_atfork(nullptr, nullptr, [] { g_attached.store(false); });
}

// The code id of the one frame allocations older than the attach show: no code object has it (ids
// count up from 1, or are addresses).
constexpr uint64_t kBeforeAttachCode = 0x7FFF'FFFF'FFFF'FFF0ull;  // the top bit is ring::kEndsLoopCall's

void say(int socket, const std::string& line) {
  std::string text = line + "\n";
  for (size_t sent = 0; sent < text.size();) {
    ssize_t n = ::send(socket, text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    sent += static_cast<size_t>(n);
  }
}

int connect_to(const char* path) {
  if (!path || std::strlen(path) >= sizeof(sockaddr_un::sun_path)) return -1;
  int s = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strcpy(addr.sun_path, path);
  if (s >= 0 && ::connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) return s;
  if (s >= 0) ::close(s);
  return -1;
}

// Waits for "stop" or the end of the connection.
void wait_for_stop(int socket) {
  std::string input;
  char buffer[64];
  for (;;) {
    ssize_t n = ::recv(socket, buffer, sizeof buffer, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    input.append(buffer, static_cast<size_t>(n));
    if (input.find("stop\n") != std::string::npos) return;
  }
}

// The devices whose primary context the program made (the runtime's, which PyTorch and most
// programs use): each is made current on this thread for a moment, so that the device layer is
// sampled there as memtrace run samples it after an allocation. Creates no context. The count of
// active ones.
int sample_devices_in_use(uint64_t caller) {
  static RealFunction<int (*)(int*)> device_count("cuDeviceGetCount", Library::kDriver);
  static RealFunction<int (*)(int, unsigned*, int*)> get_state("cuDevicePrimaryCtxGetState", Library::kDriver);
  static RealFunction<int (*)(void**, int)> retain("cuDevicePrimaryCtxRetain", Library::kDriver);
  static RealFunction<int (*)(int)> release("cuDevicePrimaryCtxRelease_v2", Library::kDriver);
  static RealFunction<int (*)(void*)> push("cuCtxPushCurrent_v2", Library::kDriver);
  static RealFunction<int (*)(void**)> pop("cuCtxPopCurrent_v2", Library::kDriver);
  auto count_fn = device_count.get(caller);
  auto state_fn = get_state.get(caller);
  auto retain_fn = retain.get(caller);
  auto release_fn = release.get(caller);
  auto push_fn = push.get(caller);
  auto pop_fn = pop.get(caller);
  int count = 0, active_devices = 0;
  if (!count_fn || !state_fn || !retain_fn || !release_fn || !push_fn || !pop_fn || count_fn(&count) != 0) return 0;
  for (int device = 0; device < count; ++device) {
    unsigned flags = 0;
    int active = 0;
    void* context = nullptr;
    if (state_fn(device, &flags, &active) != 0 || !active || retain_fn(&context, device) != 0) continue;
    if (push_fn(context) == 0) {
      ++active_devices;
      describe_devices_once(caller);
      sample_device_memory(caller, device, UINT64_MAX);
      void* popped = nullptr;
      pop_fn(&popped);
    }
    release_fn(device);
  }
  return active_devices;
}

// Runs CODE in the process's Python, with the GIL taken on this thread; false when there is no
// initialized Python here (or it is finalizing: the process is ending).
bool run_python(const std::string& code) {
  auto is_initialized = reinterpret_cast<int (*)()>(::dlsym(RTLD_DEFAULT, "Py_IsInitialized"));
  auto is_finalizing = reinterpret_cast<int (*)()>(::dlsym(RTLD_DEFAULT, "Py_IsFinalizing"));  // 3.13
  if (!is_finalizing) is_finalizing = reinterpret_cast<int (*)()>(::dlsym(RTLD_DEFAULT, "_Py_IsFinalizing"));
  auto ensure = reinterpret_cast<int (*)()>(::dlsym(RTLD_DEFAULT, "PyGILState_Ensure"));
  auto release = reinterpret_cast<void (*)(int)>(::dlsym(RTLD_DEFAULT, "PyGILState_Release"));
  auto run_string = reinterpret_cast<int (*)(const char*)>(::dlsym(RTLD_DEFAULT, "PyRun_SimpleString"));
  if (!is_initialized || !ensure || !release || !run_string || !is_initialized() || (is_finalizing && is_finalizing()))
    return false;
  int state = ensure();
  run_string(code.c_str());
  release(state);
  return true;
}

// Python code that runs BODY (indented four spaces), quietly, in a dictionary of its own.
std::string quietly(const std::string& body) {
  return "exec('''\ntry:\n" + body + "except Exception:\n    pass\n''', {})\n";
}

// Python's part: the shim (Python frames, PyTorch's tracker and hooks), then what PyTorch's
// allocator holds now. False when there is no initialized Python here.
bool start_python(const char* folder) {
  Dl_info self{};
  if (!folder || !*folder || !::dladdr(reinterpret_cast<void*>(&start_python), &self) || !self.dli_fname) return false;
  std::string library = self.dli_fname;
  if (std::string(folder).find('\'') != std::string::npos || library.find('\'') != std::string::npos) return false;
  return run_python(
      quietly("    import ctypes, importlib.util, sys\n"
              "    if '_memtrace_shim' not in sys.modules:\n"
              "        spec = importlib.util.spec_from_file_location('_memtrace_shim', '" +
              std::string(folder) + "/_memtrace_shim/__init__.py', submodule_search_locations=['" + folder +
              "/_memtrace_shim'])\n"
              "        module = importlib.util.module_from_spec(spec)\n"
              "        sys.modules['_memtrace_shim'] = module\n"
              "        spec.loader.exec_module(module)\n"
              "    sys.modules['_memtrace_shim'].recording_started(ctypes.PyDLL('" +
              library + "'))\n"));
}

// memtrace detaches: PyTorch's functions as they were (the shim's hooks taken out).
void stop_python() {
  run_python(
      quietly("    import sys\n"
              "    if '_memtrace_shim' in sys.modules:\n"
              "        sys.modules['_memtrace_shim'].recording_stopped()\n"));
}

void* attach_main(void*) {
  int socket = connect_to(setting(kAttachSocket));
  if (socket < 0) {
    g_attached.store(false);
    return nullptr;
  }
  std::string why;
  if (session_recording()) {
    why = "it is recorded already (memtrace run, memtrace.record or another memtrace attach)";
  } else {
    prepare_native_stacks();
    if (!begin_session()) {
      why = "memtrace's collector could not be reached (or a recording of it is still starting or ending)";
    } else if (!cupti_subscribed(why)) {
      end_session();
      why = "CUPTI's callbacks could not be turned on: " + why;
    }
  }
  if (!why.empty()) {
    say(socket, "failed " + why);
    ::close(socket);
    g_attached.store(false);
    return nullptr;
  }
  const uint64_t caller = MEMTRACE_CALLER;
  int devices = sample_devices_in_use(caller);
  publish_notice(
      "memtrace attach joined this process while it ran: what it allocated before is in this trace only where "
      "PyTorch's allocator still held it (marked live before memtrace attached); the device layer at the attach "
      "is " +
      std::string(devices ? "sampled then" : "unknown (no CUDA context yet)"));
  bool python = start_python(setting(kShimFolder));
  if (python && devices) sample_devices_in_use(caller);  // the device layer beside what PyTorch held
  say(socket, std::string("started") + (python ? " python" : ""));
  wait_for_stop(socket);
  if (python) stop_python();
  stop_cupti();
  end_session();
  say(socket, "stopped");
  ::close(socket);
  g_attached.store(false);
  return nullptr;
}

}  // namespace

// Called by memtrace attach on the thread it stopped: takes SETTINGS ("NAME=VALUE" lines) and
// starts the attach thread. 0 when it started; 1 when one runs already; 2 when the settings do not
// fit or no thread could be started; 3 in a set-user-ID program (AT_SECURE), which memtrace never
// records. Makes no CUDA call and takes no lock of its own.
MEMTRACE_EXPORT int memtrace_attach(const char* settings) {
  if (secure_program()) return 3;
  if (g_attached.exchange(true)) return 1;
  if (!settings || !set_attach_settings(settings)) {
    g_attached.store(false);
    return 2;
  }
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  // The thread takes none of the program's signals (its Ctrl-C, SIGCHLD, timers): it starts with
  // all blocked, whatever the stopped thread's mask was.
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &previous);
  pthread_t thread;
  int started = pthread_create(&thread, &attr, attach_main, nullptr);
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  pthread_attr_destroy(&attr);
  if (started != 0) {
    g_attached.store(false);
    return 2;
  }
  return 0;
}

// An allocation the process held before recording started (memtrace attach, memtrace.record), as
// PyTorch's allocator reports it: API (a cudaMalloc, a PyTorch segment or block) at ADDR, SIZE
// bytes, on DEVICE and STREAM. Its time is now, its stack one frame: "live before memtrace
// attached" (or "live before recording started", from memtrace.record), described once a session.
MEMTRACE_EXPORT void memtrace_existing(int api, int device, uint64_t addr, uint64_t size, uint64_t stream) {
  if (api <= 0 || api >= static_cast<int>(Api::kCount) || !session_recording()) return;
  static std::atomic<uint64_t> described{0};
  if (const uint64_t session = session_number(); described.exchange(session) != session)
    publish_code(kBeforeAttachCode,
                 setting(kAttachSocket) ? "live before memtrace attached" : "live before recording started", "", 0,
                 static_cast<uint8_t>(python::LineTable::kLines), {});
  Event e;
  e.api = static_cast<Api>(api);
  e.kind = api_info(e.api).kind;
  e.layer = api_info(e.api).layer;
  e.device = device;
  e.addr = addr;
  e.size = size;
  e.stream = stream;
  e.flags = kEventBeforeRecording;
  if (e.api == Api::kTorchSegmentAlloc) note_segment_before_recording(addr, size);
  StackCapture stack;
  stack.native_count = 0;
  stack.python_count = 1;
  stack.python_state = ring::kPythonFrames;
  stack.python[0] = kBeforeAttachCode;
  stack.python[1] = 0;
  publish(e, stamp(e), &stack);
}
