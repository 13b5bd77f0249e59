// The Python shim (lib/python/_memtrace_shim) runs once per process image: from the sitecustomize
// memtrace puts on PYTHONPATH, or, where Python ignores PYTHONPATH or skips site (python -E, -I,
// -S: sitecustomize is never imported), started by the injector itself. For that, a thread of the
// injector's waits until the interpreter is initialized (Py_IsInitialized reads a flag: no GIL
// needed), then asks it, through Py_AddPendingCall ("doesn't need a current thread state ... nor the
// global interpreter lock", the C API's documentation), to run the shim in its main thread with the
// GIL at its next safe point (again a millisecond later while the shim has not claimed the process).
// A safe point often falls inside an import (site's own, which imports sitecustomize; torch's),
// where modules half imported must not be touched: the pending code then does nothing more than
// ask (one expression), and the next one asks again. The code runs in a dictionary of its own:
// nothing is added to the program's __main__ or sys.path. (It had compiled the whole start code at
// each try and waited for the import's end with a profile function, called at every Python call:
// site's own import, during which Py_IsInitialized is already true and sitecustomize has not yet
// claimed the process, took ~25 ms longer in every traced Python program.)
#include <dlfcn.h>
#include <pthread.h>
#include <time.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "interpose.h"
#include "memtrace/ring/environment.h"
#include "python_symbol.h"
#include "settings.h"

namespace memtrace::inject {
namespace {

std::atomic<bool> g_claimed{false};
std::atomic<bool> g_call_pending{false};  // one pending call at a time: Python's queue is short

// The C API the pending call uses (all with the GIL).
using Object = void;
struct PythonCalls {
  Object* (*compile)(const char*, const char*, int) = nullptr;  // Py_CompileString
  Object* (*eval)(Object*, Object*, Object*) = nullptr;         // PyEval_EvalCode
  Object* (*new_dict)() = nullptr;                              // PyDict_New
  int (*dict_set)(Object*, const char*, Object*) = nullptr;     // PyDict_SetItemString
  Object* (*builtins)() = nullptr;                              // PyEval_GetBuiltins: borrowed
  void (*decref)(Object*) = nullptr;                            // Py_DecRef
  void (*clear_error)() = nullptr;                              // PyErr_Clear
  int (*is_true)(Object*) = nullptr;                            // PyObject_IsTrue
  bool complete() const {
    return compile && eval && new_dict && dict_set && builtins && decref && clear_error && is_true;
  }
};
PythonCalls g_py;
// Py_file_input, Py_eval_input (Include/compile.h, every 3.x).
constexpr int kFileInput = 257, kEvalInput = 258;
// Whether the shim may start now: not started, and no import under way in this thread (the main
// one). One expression: each try compiles it (a code object kept across tries could outlive its
// interpreter in a program that finalizes Python and starts it again).
constexpr const char* kMayStart =
    "'_memtrace_shim' not in __import__('sys').modules and not any("
    "getattr(r(), 'owner', None) == __import__('_thread').get_ident() for r in "
    "list(getattr(__import__('sys').modules.get('_frozen_importlib'), '_module_locks', {}).values()))";
std::string* g_start_code = nullptr;  // the Python code that starts the shim (once kMayStart says so)

// The value of the code SOURCE (compiled as MODE) in a dictionary of its own; null on an error,
// which is cleared: never an exception into the program.
Object* evaluate(const char* source, int mode) {
  Object* code = g_py.compile(source, "<memtrace>", mode);
  Object* globals = code ? g_py.new_dict() : nullptr;
  Object* result = nullptr;
  if (globals && g_py.dict_set(globals, "__builtins__", g_py.builtins()) == 0)
    result = g_py.eval(code, globals, globals);
  if (!result) g_py.clear_error();
  if (globals) g_py.decref(globals);
  if (code) g_py.decref(code);
  return result;
}

int run_shim(void*) {
  if (!g_claimed.load(std::memory_order_acquire)) {
    Object* may = evaluate(kMayStart, kEvalInput);
    const bool start = may && g_py.is_true(may) == 1;
    if (may) g_py.decref(may);
    if (start) {
      if (Object* done = evaluate(g_start_code->c_str(), kFileInput)) g_py.decref(done);
    } else {
      g_py.clear_error();  // (is_true's, if any)
    }
  }
  g_call_pending.store(false, std::memory_order_release);
  return 0;
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
  find_python(g_py.compile, "Py_CompileString");
  find_python(g_py.eval, "PyEval_EvalCode");
  find_python(g_py.new_dict, "PyDict_New");
  find_python(g_py.dict_set, "PyDict_SetItemString");
  find_python(g_py.builtins, "PyEval_GetBuiltins");
  find_python(g_py.decref, "Py_DecRef");
  find_python(g_py.clear_error, "PyErr_Clear");
  find_python(g_py.is_true, "PyObject_IsTrue");
  if (!g_py.complete() || !::dlsym(RTLD_DEFAULT, "Py_IsInitialized")) return;  // no Python in this program
  // Before 3.7, Py_IsInitialized is true from the start of Py_Initialize (CPython 3.6
  // Python/pylifecycle.c sets `initialized = 1` before builtins and importlib exist), and a pending
  // call run then breaks the interpreter's start. Those Pythons get the shim from site alone.
  auto version = reinterpret_cast<const char* (*)()>(::dlsym(RTLD_DEFAULT, "Py_GetVersion"));
  const char* v = version ? version() : nullptr;  // "3.6.15 (default, ...": a constant, no interpreter needed
  if (!v || v[0] < '3' || (v[0] == '3' && v[1] == '.' && std::atoi(v + 2) < 7)) return;
  std::string folder = shim_folder();
  if (folder.empty() || folder.find('\'') != std::string::npos) return;
  g_start_code = new std::string(
      "try:\n"
      "    import importlib.util, sys\n"
      "    spec = importlib.util.spec_from_file_location('_memtrace_shim', '" +
      folder + "/_memtrace_shim/__init__.py', submodule_search_locations=['" + folder +
      "/_memtrace_shim'])\n"
      "    module = importlib.util.module_from_spec(spec)\n"
      "    sys.modules['_memtrace_shim'] = module\n"
      "    spec.loader.exec_module(module)\n"
      "    module._started_by_injector()\n"
      "except Exception:\n"
      "    pass\n");
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
