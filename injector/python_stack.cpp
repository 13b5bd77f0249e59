// Python frames of the allocating thread, through CPython's C API found with dlsym at run time
// (memtrace links no libpython). Works on CPython 3.9 to 3.13. Only a thread that holds the GIL
// may walk its frames; others are marked as such.
#include <dlfcn.h>

#include <atomic>
#include <cstring>
#include <string>
#include <unordered_set>

#include "memtrace/ring/protocol.h"
#include "session.h"
#include "stack_capture.h"

namespace memtrace::inject {
namespace {

using Object = void;

struct PythonApi {
  int (*is_initialized)() = nullptr;
  int (*gil_check)() = nullptr;
  Object* (*current_frame)() = nullptr;                 // PyEval_GetFrame: borrowed
  Object* (*frame_back)(Object*) = nullptr;             // PyFrame_GetBack: new reference
  Object* (*frame_code)(Object*) = nullptr;             // PyFrame_GetCode: new reference
  int (*frame_line)(Object*) = nullptr;                 // PyFrame_GetLineNumber
  void (*decref)(Object*) = nullptr;                    // Py_DecRef
  Object* (*get_attr)(Object*, const char*) = nullptr;  // PyObject_GetAttrString: new reference
  const char* (*utf8)(Object*) = nullptr;               // PyUnicode_AsUTF8
  void (*err_fetch)(Object**, Object**, Object**) = nullptr;
  void (*err_restore)(Object*, Object*, Object*) = nullptr;
  bool complete() const {
    return is_initialized && gil_check && current_frame && frame_back && frame_code && frame_line && decref &&
           get_attr && utf8 && err_fetch && err_restore;
  }
};

template <typename Fn>
void find(Fn& fn, const char* name) {
  fn = reinterpret_cast<Fn>(::dlsym(RTLD_DEFAULT, name));
}

// A program without Python is asked again only when modules were loaded since (an embedding
// program may load Python after its first CUDA call); dlsym on every allocation would be slow.
std::atomic<bool> g_look_again{true};

const PythonApi* python_api() {
  static PythonApi api;
  static bool found = false;
  if (found) return &api;
  if (!g_look_again.exchange(false, std::memory_order_relaxed)) return nullptr;
  find(api.is_initialized, "Py_IsInitialized");
  if (!api.is_initialized) return nullptr;
  find(api.gil_check, "PyGILState_Check");
  find(api.current_frame, "PyEval_GetFrame");
  find(api.frame_back, "PyFrame_GetBack");
  find(api.frame_code, "PyFrame_GetCode");
  find(api.frame_line, "PyFrame_GetLineNumber");
  find(api.decref, "Py_DecRef");
  find(api.get_attr, "PyObject_GetAttrString");
  find(api.utf8, "PyUnicode_AsUTF8");
  find(api.err_fetch, "PyErr_Fetch");
  find(api.err_restore, "PyErr_Restore");
  found = api.complete();  // Python older than 3.9 lacks PyFrame_GetCode: no Python frames
  return found ? &api : nullptr;
}

// Code objects already described to the collector. Only touched with the GIL held. Each stays
// referenced, so its address never names another code object.
std::unordered_set<uint64_t>* g_described = nullptr;

std::string attribute_text(const PythonApi& py, Object* code, const char* name) {
  Object* value = py.get_attr(code, name);
  if (!value) return {};
  const char* text = py.utf8(value);
  std::string result = text ? text : "";
  py.decref(value);
  return result;
}

// Sends the collector the names of CODE (a new reference we keep).
void describe(const PythonApi& py, Object* code) {
  Object *type, *value, *traceback;
  py.err_fetch(&type, &value, &traceback);                     // leave the program's pending exception alone
  std::string name = attribute_text(py, code, "co_qualname");  // 3.11+
  if (name.empty()) name = attribute_text(py, code, "co_name");
  std::string file = attribute_text(py, code, "co_filename");
  py.err_restore(type, value, traceback);
  publish_code(reinterpret_cast<uint64_t>(code), name, file);
}

}  // namespace

void forget_described_code() { g_described = nullptr; }  // the references stay: they are harmless

void look_for_python_again() { g_look_again.store(true, std::memory_order_relaxed); }

void capture_python(int max_frames, StackCapture& stack) {
  const PythonApi* py = python_api();
  if (!py || !py->is_initialized()) return;
  if (!py->gil_check()) {
    stack.python_state = ring::kPythonNoGil;
    return;
  }
  stack.python_state = ring::kPythonFrames;
  if (!g_described) g_described = new std::unordered_set<uint64_t>;
  Object* frame = py->current_frame();
  bool owned = false;  // the first frame is borrowed, the ones PyFrame_GetBack gives are ours
  while (frame && stack.python_count < max_frames) {
    Object* code = py->frame_code(frame);
    uint64_t id = reinterpret_cast<uint64_t>(code);
    stack.python[2 * stack.python_count] = id;
    stack.python[2 * stack.python_count + 1] = static_cast<uint64_t>(py->frame_line(frame));
    ++stack.python_count;
    if (g_described->insert(id).second)
      describe(*py, code);
    else
      py->decref(code);
    Object* back = py->frame_back(frame);
    if (owned) py->decref(frame);
    frame = back;
    owned = true;
  }
  if (owned && frame) py->decref(frame);
}

}  // namespace memtrace::inject
