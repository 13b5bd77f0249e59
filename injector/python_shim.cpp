// The Python shim (lib/python/_memtrace_shim) runs once per process image: from the sitecustomize
// memtrace puts on PYTHONPATH, or, where Python ignores PYTHONPATH or skips site (python -E, -I,
// -S: sitecustomize is never imported), started by the injector itself. For that, a thread of the
// injector's waits until the interpreter is initialized (Py_IsInitialized reads a flag: no GIL
// needed), then asks it, through Py_AddPendingCall ("doesn't need a current thread state ... nor the
// global interpreter lock", the C API's documentation), to run the shim in its main thread with the
// GIL at its next safe point (again a little later while the shim has not claimed the process). A
// safe point often falls inside an import (site's own, which imports sitecustomize; torch's), where
// modules half imported must not be touched: the pending code then waits, with a profile function
// of the main thread's, for the outermost import to return, and starts the shim there. The code runs
// in a dictionary of its own: nothing is added to the program's __main__ or sys.path.
#include <dlfcn.h>
#include <pthread.h>
#include <time.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "interpose.h"
#include "memtrace/ring/environment.h"
#include "settings.h"

namespace memtrace::inject {
namespace {

std::atomic<bool> g_claimed{false};
std::atomic<bool> g_call_pending{false};  // one pending call at a time: Python's queue is short

std::string* g_start_code = nullptr;         // the Python code that starts the shim, from its folder
int (*g_run_string)(const char*) = nullptr;  // PyRun_SimpleString

int run_shim(void*) {
  if (!g_claimed.load(std::memory_order_acquire)) g_run_string(g_start_code->c_str());
  g_call_pending.store(false, std::memory_order_release);
  return 0;  // never an exception into the program
}

void* wait_for_python(void*) {
  auto is_initialized = reinterpret_cast<int (*)()>(::dlsym(RTLD_DEFAULT, "Py_IsInitialized"));
  auto add_pending_call = reinterpret_cast<int (*)(int (*)(void*), void*)>(::dlsym(RTLD_DEFAULT, "Py_AddPendingCall"));
  if (!is_initialized || !add_pending_call) return nullptr;
  for (int tries = 0; tries < 60'000 && !g_claimed.load(std::memory_order_acquire); ++tries) {  // a minute at most
    if (is_initialized() && !g_call_pending.exchange(true) && add_pending_call(run_shim, nullptr) != 0)
      g_call_pending.store(false);
    timespec pause{0, 1'000'000};
    ::nanosleep(&pause, nullptr);
  }
  return nullptr;
}

// The shim's folder: lib/python beside this library.
std::string shim_folder() {
  Dl_info info{};
  if (!::dladdr(reinterpret_cast<void*>(&shim_folder), &info) || !info.dli_fname) return {};
  std::string self = info.dli_fname;
  size_t slash = self.rfind('/');
  return slash == std::string::npos ? std::string("python") : self.substr(0, slash) + "/python";
}

__attribute__((constructor)) void start_shim_where_site_does_not() {
  const char* socket = setting(env::kSocket);
  if (!socket || !*socket) return;  // not traced
  if (const char* in_process = setting(env::kInProcess); in_process && std::strcmp(in_process, "1") == 0)
    return;  // memtrace.record starts the shim itself
  g_run_string = reinterpret_cast<int (*)(const char*)>(::dlsym(RTLD_DEFAULT, "PyRun_SimpleString"));
  if (!g_run_string || !::dlsym(RTLD_DEFAULT, "Py_IsInitialized")) return;  // no Python in this program
  // Before 3.7, Py_IsInitialized is true from the start of Py_Initialize (CPython 3.6
  // Python/pylifecycle.c sets `initialized = 1` before builtins and importlib exist), and a pending
  // call run then breaks the interpreter's start. Those Pythons get the shim from site alone.
  auto version = reinterpret_cast<const char* (*)()>(::dlsym(RTLD_DEFAULT, "Py_GetVersion"));
  const char* v = version ? version() : nullptr;  // "3.6.15 (default, ...": a constant, no interpreter needed
  if (!v || v[0] < '3' || (v[0] == '3' && v[1] == '.' && std::atoi(v + 2) < 7)) return;
  std::string folder = shim_folder();
  if (folder.empty() || folder.find('\'') != std::string::npos) return;
  g_start_code = new std::string(
      "exec('''\n"
      "try:\n"
      "    import _thread, sys\n"
      "    def importing():\n"
      "        bootstrap, me = sys.modules.get('_frozen_importlib'), _thread.get_ident()\n"
      "        return any(getattr(r(), 'owner', None) == me for r in\n"
      "                   list(getattr(bootstrap, '_module_locks', {}).values()))\n"
      "    def start():\n"
      "        if '_memtrace_shim' in sys.modules:\n"
      "            return\n"
      "        import importlib.util\n"
      "        spec = importlib.util.spec_from_file_location('_memtrace_shim', '" +
      folder + "/_memtrace_shim/__init__.py', submodule_search_locations=['" + folder +
      "/_memtrace_shim'])\n"
      "        module = importlib.util.module_from_spec(spec)\n"
      "        sys.modules['_memtrace_shim'] = module\n"
      "        spec.loader.exec_module(module)\n"
      "        module._started_by_injector()\n"
      "    def after_imports(frame, event, arg):\n"
      "        if '_memtrace_shim' in sys.modules:\n"  // started meanwhile (a later try): nothing to wait for
      "            sys.setprofile(None)\n"
      "        elif event == 'return' and frame.f_code.co_name == '_find_and_load' and not importing():\n"
      "            sys.setprofile(None)\n"
      "            try:\n"
      "                start()\n"
      "            except Exception:\n"
      "                pass\n"
      "    if '_memtrace_shim' not in sys.modules:\n"
      "        if not importing():\n"
      "            start()\n"
      "        elif sys.getprofile() is None:\n"
      "            sys.setprofile(after_imports)\n"
      "except Exception:\n"
      "    pass\n"
      "''', {})\n");
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t thread;
  pthread_create(&thread, &attr, wait_for_python, nullptr);
  pthread_attr_destroy(&attr);
}

}  // namespace
}  // namespace memtrace::inject

// The shim's first call: 1 once per process image (a forked child's Python has the shim already).
MEMTRACE_EXPORT int memtrace_shim_claim() { return !memtrace::inject::g_claimed.exchange(true) ? 1 : 0; }
