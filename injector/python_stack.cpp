// Python frames of the allocating thread, whether or not it holds the GIL (PyTorch releases it
// around every op, ctypes.CDLL around every call). memtrace links no libpython: the interpreter
// is found with dlsym at run time, its version read once, and its frames read from its own
// structures (python_reader.h) by the offsets of its version (python_layout.h). Those offsets
// are checked once against the interpreter's C API, from a thread that holds the GIL (the
// Python shim asks at start-up: memtrace_python_ready), before any frame is read that way. Until
// then, and on an interpreter whose layout memtrace does not know, a thread's frames are taken
// through the C API when it holds the GIL, and marked unknown when it does not; one notice in
// the trace says so.
//
// Code objects get ids of their own: one that dies and leaves its address to another gets a new
// id, and each id is described once (names, first line, line table), so the injector records
// only (code id, instruction offset) per frame and the collector computes the lines.
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "interpose.h"
#include "memtrace/ring/environment.h"
#include "memtrace/ring/protocol.h"
#include "python_reader.h"
#include "python_symbol.h"
#include "session.h"
#include "settings.h"
#include "stack_capture.h"
#include "thread_block.h"

namespace memtrace::inject {
namespace {

using Object = void;

struct PythonApi {
  int (*is_initialized)() = nullptr;
  int (*gil_check)() = nullptr;
  Object* (*this_thread_state)() = nullptr;             // PyGILState_GetThisThreadState: needs no GIL
  Object* (*current_frame)() = nullptr;                 // PyEval_GetFrame: borrowed
  Object* (*frame_back)(Object*) = nullptr;             // PyFrame_GetBack: new reference
  Object* (*frame_code)(Object*) = nullptr;             // PyFrame_GetCode: new reference
  int (*frame_line)(Object*) = nullptr;                 // PyFrame_GetLineNumber
  void (*incref)(Object*) = nullptr;                    // Py_IncRef
  void (*decref)(Object*) = nullptr;                    // Py_DecRef
  Object* (*get_attr)(Object*, const char*) = nullptr;  // PyObject_GetAttrString: new reference
  const char* (*utf8)(Object*) = nullptr;               // PyUnicode_AsUTF8
  void (*err_fetch)(Object**, Object**, Object**) = nullptr;
  void (*err_restore)(Object*, Object*, Object*) = nullptr;
  const char* (*version)() = nullptr;                                  // Py_GetVersion: "3.12.1 (main, ...)"
  Object* (*code_new_empty)(const char*, const char*, int) = nullptr;  // PyCode_NewEmpty: new reference
  uint64_t code_type = 0;                                              // &PyCode_Type
  const void* runtime = nullptr;  // &_PyRuntime (3.13: starts with _Py_DebugOffsets)
  int minor = 0;
  // The evaluation loop's code, and what says whether the interpreter evaluates frames with it
  // (a PEP 523 function, such as torch.compile's, may stand in its place): none of them needs
  // the GIL.
  uint64_t loop_start = 0, loop_end = 0;              // _PyEval_EvalFrameDefault
  Object* (*interpreter_of)(Object*) = nullptr;       // PyThreadState_GetInterpreter
  const void* (*frame_evaluator)(Object*) = nullptr;  // _PyInterpreterState_GetEvalFrameFunc
  bool complete() const {
    return is_initialized && gil_check && this_thread_state && current_frame && frame_back && frame_code &&
           frame_line && incref && decref && get_attr && utf8 && err_fetch && err_restore && version && code_type;
  }
};

// A program without Python is asked again only when modules were loaded since (an embedding
// program may load Python after its first CUDA call); dlsym on every allocation would be slow.
std::atomic<bool> g_look_again{true};
std::atomic<const PythonApi*> g_api{nullptr};
std::mutex g_api_mutex;  // taken only to find the interpreter

const PythonApi* python_api() {
  if (const PythonApi* api = g_api.load(std::memory_order_acquire)) return api;
  if (!g_look_again.exchange(false, std::memory_order_relaxed)) return nullptr;
  std::lock_guard lock(g_api_mutex);
  if (const PythonApi* api = g_api.load(std::memory_order_acquire)) return api;
  auto* api = new PythonApi;
  find_python(api->is_initialized, "Py_IsInitialized");
  find_python(api->gil_check, "PyGILState_Check");
  find_python(api->this_thread_state, "PyGILState_GetThisThreadState");
  find_python(api->current_frame, "PyEval_GetFrame");
  find_python(api->frame_back, "PyFrame_GetBack");
  find_python(api->frame_code, "PyFrame_GetCode");
  find_python(api->frame_line, "PyFrame_GetLineNumber");
  find_python(api->incref, "Py_IncRef");
  find_python(api->decref, "Py_DecRef");
  find_python(api->get_attr, "PyObject_GetAttrString");
  find_python(api->utf8, "PyUnicode_AsUTF8");
  find_python(api->err_fetch, "PyErr_Fetch");
  find_python(api->err_restore, "PyErr_Restore");
  find_python(api->version, "Py_GetVersion");
  api->code_type = reinterpret_cast<uint64_t>(::dlsym(RTLD_DEFAULT, "PyCode_Type"));
  api->runtime = ::dlsym(RTLD_DEFAULT, "_PyRuntime");
  if (!api->complete()) {  // no Python, or older than 3.9 (no PyFrame_GetCode): no Python frames
    delete api;
    return nullptr;
  }
  const char* v = api->version();
  api->minor = v && v[0] == '3' && v[1] == '.' ? std::atoi(v + 2) : 0;
  find_python(api->code_new_empty, "PyCode_NewEmpty");
  find_python(api->interpreter_of, "PyThreadState_GetInterpreter");
  find_python(api->frame_evaluator, "_PyInterpreterState_GetEvalFrameFunc");
  Dl_info info{};
  void* symbol = nullptr;  // its ElfW(Sym), whose size says where the function ends
  if (void* loop = ::dlsym(RTLD_DEFAULT, "_PyEval_EvalFrameDefault");
      loop && ::dladdr1(loop, &info, &symbol, RTLD_DL_SYMENT) && symbol &&
      static_cast<const ElfW(Sym)*>(symbol)->st_size > 0) {
    api->loop_start = reinterpret_cast<uint64_t>(loop);
    api->loop_end = api->loop_start + static_cast<const ElfW(Sym)*>(symbol)->st_size;
  }
  g_api.store(api, std::memory_order_release);
  return api;
}

// How this process's Python frames are read: not decided yet, from the interpreter's structures
// (checked), or through the C API alone (with the GIL).
enum Reading : int { kUndecided, kDirect, kApiOnly };
std::atomic<int> g_reading{kUndecided};
PythonLayout g_layout;  // written once, before g_reading turns kDirect

// Code ids, and the code objects described to the collector: by address, with what tells one
// code object from the next at that address (code_identity). Under a lock held across fork (a
// child gets it free), and across the description's publication, so that no event names an id
// before the record describing it is in the ring.
struct KnownCode {
  uint64_t identity;
  uint64_t id;
};
std::mutex g_codes_mutex;
std::unordered_map<uint64_t, KnownCode>* g_codes = new std::unordered_map<uint64_t, KnownCode>();
std::atomic<uint64_t> g_next_code_id{1};
std::atomic<uint64_t> g_codes_generation{1};  // a new collector (fork) has seen no description

// A per-thread cache in front of the table: the same few code objects come in every stack.
struct CachedCode {
  uint64_t address = 0, identity = 0, id = 0, generation = 0;
  uint64_t deaths = 0;  // g_code_deaths when the code object was last seen here
};
constexpr int kCacheBits = 8;
constexpr size_t kCacheSlots = size_t(1) << kCacheBits;
// This thread's cache (thread_block: too large for static TLS when the injector is loaded late).
CachedCode* code_cache() {
  return static_cast<CachedCode*>(thread_block(ThreadBlock::kPythonCodeCache, sizeof(CachedCode) * kCacheSlots));
}

// Telling a code object from a dead one at its address (code_identity) reads the object for every
// frame of every stack: its type and serial (3.12+), or ~70 instructions of its fields and texts
// (before 3.12, which has no serial). Instead, PyCode_Type's tp_dealloc is wrapped to count the
// code objects freed: while the count stands where it stood when a thread last saw a code object at
// an address, no code object has left that address to another (a code object a live frame runs
// cannot die; one that dies is counted before its memory is freed, under the GIL, which orders that
// before any frame of a later code object at its address runs). Objects/object.c, _Py_Dealloc: every object
// is freed through its type's tp_dealloc (3.9-3.13).
std::atomic<uint64_t> g_code_deaths{0};
std::atomic<bool> g_counting_deaths{false};
using Dealloc = void (*)(Object*);
Dealloc g_code_dealloc = nullptr;
const uint64_t* g_dealloc_slot = nullptr;  // PyCode_Type's tp_dealloc, set before counting starts

void count_code_death(Object* code) {
  g_code_deaths.fetch_add(1, std::memory_order_relaxed);
  g_code_dealloc(code);
}

// Wraps PyCode_Type's tp_dealloc, with the GIL held (no code object is being freed meanwhile).
// The type's tp_name ("code") checks where its slots lie: PyObject_VAR_HEAD, then tp_name,
// tp_basicsize, tp_itemsize, tp_dealloc (Include/cpython/object.h).
void count_code_deaths(const PythonApi& py, const PythonLayout& l) {
  if (g_counting_deaths.load(std::memory_order_acquire)) return;
  CheckedMemory m;
  const uint64_t name_at = py.code_type + l.ob_type + 16, dealloc_at = name_at + 24;
  uint64_t name = 0, dealloc = 0;
  char text[5] = {};
  if (!m.ok() || !load(m, name_at, name) || !plausible(name) || !m.read(name, text, sizeof text) ||
      std::memcmp(text, "code", sizeof text) != 0 || !load(m, dealloc_at, dealloc) || !plausible(dealloc))
    return;
  if (dealloc == reinterpret_cast<uint64_t>(&count_code_death)) return;  // counted once, then ended for good
  g_code_dealloc = reinterpret_cast<Dealloc>(dealloc);
  __atomic_store_n(reinterpret_cast<uint64_t*>(dealloc_at), reinterpret_cast<uint64_t>(&count_code_death),
                   __ATOMIC_RELEASE);
  g_dealloc_slot = reinterpret_cast<const uint64_t*>(dealloc_at);
  g_code_deaths.fetch_add(1, std::memory_order_relaxed);  // no thread's cache holds this count
  g_counting_deaths.store(true, std::memory_order_release);
}

__attribute__((constructor)) void hold_codes_across_fork() {
  ::pthread_atfork([] { g_codes_mutex.lock(); }, [] { g_codes_mutex.unlock(); }, [] { g_codes_mutex.unlock(); });
}

// Line tables larger than this are cut (lines past the cut read as the function's first line):
// a description must fit one ring record.
constexpr size_t kMaxTableBytes = 24 << 10;

size_t cache_slot(uint64_t code) {
  // The address's bits mixed: code objects lie at strides (a page, an arena's size classes) that
  // would put several of one stack in the same slot, each evicting the other at every stack.
  return static_cast<size_t>((code * 0x9E3779B97F4A7C15ull) >> (64 - kCacheBits));
}

// The id of the code object at CODE whose identity is IDENTITY, from the table, described to the
// collector the first time it is seen; kept in CACHE (this thread's, or null). 0 when its fields
// cannot be read.
__attribute__((noinline)) uint64_t code_id_from_table(uint64_t code, uint64_t identity, uint64_t generation,
                                                      uint64_t deaths, CachedCode* cache) {
  const PythonLayout& l = g_layout;
  DirectMemory m;
  CodeFields fields;
  if (!read_code(l, m, code, fields)) return 0;
  std::lock_guard lock(g_codes_mutex);
  auto [it, fresh] = g_codes->try_emplace(code, KnownCode{identity, 0});
  if (fresh || it->second.identity != identity) {  // new, or another code object at a dead one's address
    it->second = KnownCode{identity, g_next_code_id.fetch_add(1, std::memory_order_relaxed)};
    std::string table = read_bytes(l, m, fields.linetable, kMaxTableBytes);
    publish_code(it->second.id, read_text(l, m, fields.name), read_text(l, m, fields.filename), fields.first_line,
                 static_cast<uint8_t>(l.line_table), table);
  }
  if (cache) cache[cache_slot(code)] = CachedCode{code, identity, it->second.id, generation, deaths};
  return it->second.id;
}

// The code objects freed so far, when they are counted (DEATHS is then set to the count); false
// when they are not, or no longer: another tool may have put its own tp_dealloc in the slot since
// (one that wraps memtrace's still counts through it; one that put back what it found does not,
// and deaths may have gone uncounted whatever the slot holds later: counting ends for good).
inline bool code_deaths(uint64_t& deaths) {
  if (!g_counting_deaths.load(std::memory_order_acquire)) return false;
  if (__atomic_load_n(g_dealloc_slot, __ATOMIC_RELAXED) != reinterpret_cast<uint64_t>(&count_code_death)) {
    g_counting_deaths.store(false, std::memory_order_relaxed);
    return false;
  }
  deaths = g_code_deaths.load(std::memory_order_relaxed);
  return true;
}

// The id of the code object at CODE, whose fields lie at OFFSETS: this thread's cache first (CACHE,
// looked up once per stack; null: none could be mapped), taken as it is while no code object died
// since (COUNTED: DEATHS is the count now), else checked against what the object is now.
inline uint64_t code_id(uint64_t code, const CodeOffsets& offsets, CachedCode* cache, uint64_t generation, bool counted,
                        uint64_t deaths) {
  CachedCode* cached = cache ? &cache[cache_slot(code)] : nullptr;
  const bool known = cached && cached->address == code && cached->generation == generation;
  if (known && counted && cached->deaths == deaths) return cached->id;
  const uint64_t identity = code_identity(offsets, DirectMemory(), code);
  if (!identity) return 0;
  if (known && cached->identity == identity) {
    cached->deaths = deaths;
    return cached->id;
  }
  return code_id_from_table(code, identity, generation, deaths, cache);
}

// The frames this thread's stacks showed lately, by frame address: a frame with the same key
// (FrameKey) as one of them shows the same code id, without the checks of where it stands or a
// lookup in the code cache. The table holds only while no code object died (nor the code ids'
// generation changed) since it was filled: it is emptied when either did, so that a slot needs no
// count of its own to compare (callgrind: a slot a cache line, 64 bytes, took a line a frame).
struct KnownFrame {
  uint64_t frame, code;
  uint64_t instr_owner;  // the instruction (pointer, or f_lasti), its top byte xored with the owner
  uint64_t id;
};
static_assert(sizeof(KnownFrame) == 32, "two slots a cache line");
constexpr int kKnownFrameBits = 7;
constexpr size_t kKnownFrames = size_t(1) << kKnownFrameBits;

// A frame's key as a slot holds it (3.11+: a user-space pointer, below 2^56; 3.9, 3.10: f_lasti,
// and no owner).
inline uint64_t instr_owner(const FrameKey& key) {
  return key.instr ^ static_cast<uint64_t>(static_cast<uint8_t>(key.owner)) << 56;
}

// This thread's table, for code ids of GENERATION while DEATHS code objects died (emptied first
// when it was filled for others); null when it cannot be mapped. Its last slot says for what.
KnownFrame* known_frames(uint64_t generation, uint64_t deaths) {
  auto* known =
      static_cast<KnownFrame*>(thread_block(ThreadBlock::kPythonFrames, sizeof(KnownFrame) * (kKnownFrames + 1)));
  if (!known) return nullptr;
  KnownFrame& header = known[kKnownFrames];
  if (header.frame != generation || header.code != deaths) {
    std::memset(known, 0, sizeof(KnownFrame) * kKnownFrames);
    header = KnownFrame{generation, deaths, 0, 0};
  }
  return known;
}

// By the address's 64-byte line: 3.11+'s frames lie one after the other on the thread's own
// stack of frames, each larger than 64 bytes, so a stack's frames within 8 KB take a slot each (a
// hash of the address put two of 22 frames in one slot on most stacks, each evicting the other).
KnownFrame& known_slot(KnownFrame* known, uint64_t frame) { return known[(frame >> 6) & (kKnownFrames - 1)]; }

// Through the C API, with the GIL: code objects are kept referenced (their address then names
// them for good), described by their attributes, and frames give their lines.
std::unordered_set<uint64_t>* g_described_by_api = nullptr;

std::string attribute_text(const PythonApi& py, Object* code, const char* name) {
  Object* value = py.get_attr(code, name);
  if (!value) return {};
  const char* text = py.utf8(value);
  std::string result = text ? text : "";
  py.decref(value);
  return result;
}

void describe_by_api(const PythonApi& py, Object* code) {
  Object *type, *value, *traceback;
  py.err_fetch(&type, &value, &traceback);                     // leave the program's pending exception alone
  std::string name = attribute_text(py, code, "co_qualname");  // 3.11+
  if (name.empty()) name = attribute_text(py, code, "co_name");
  std::string file = attribute_text(py, code, "co_filename");
  py.err_restore(type, value, traceback);
  publish_code(reinterpret_cast<uint64_t>(code), name, file, 0, static_cast<uint8_t>(python::LineTable::kLines), {});
}

// The frames through the C API: (code object, line) pairs. With DESCRIBE, each code object is
// described once and kept; without, nothing is published (the layout check).
int api_frames(const PythonApi& py, int max_frames, uint64_t* pairs, bool describe) {
  if (describe && !g_described_by_api) g_described_by_api = new std::unordered_set<uint64_t>;
  int count = 0;
  Object* frame = py.current_frame();
  bool owned = false;  // the first frame is borrowed, the ones PyFrame_GetBack gives are ours
  while (frame && count < max_frames) {
    Object* code = py.frame_code(frame);
    pairs[2 * count] = reinterpret_cast<uint64_t>(code);
    pairs[2 * count + 1] = static_cast<uint64_t>(py.frame_line(frame));
    ++count;
    if (describe && g_described_by_api->insert(reinterpret_cast<uint64_t>(code)).second)
      describe_by_api(py, code);  // the new reference stays: the address names this code for good
    else
      py.decref(code);
    Object* back = py.frame_back(frame);
    if (owned) py.decref(frame);
    frame = back;
    owned = true;
  }
  if (owned && frame) py.decref(frame);
  return count;
}

// Whether code objects made one after the other read as numbered one after the other at the
// layout's code_serial: two made here, with the GIL held (no other thread makes one between).
bool serials_count_up(const PythonApi& py, const PythonLayout& layout) {
  if (!py.code_new_empty) return false;
  Object *type, *value, *traceback;
  py.err_fetch(&type, &value, &traceback);  // leave the program's pending exception alone
  Object* first = py.code_new_empty("memtrace", "first", 1);
  Object* second = first ? py.code_new_empty("memtrace", "second", 1) : nullptr;
  uint32_t a = 0, b = 0;
  CheckedMemory m;
  const bool ok = second && m.ok() && load(m, reinterpret_cast<uint64_t>(first) + layout.code_serial, a) &&
                  load(m, reinterpret_cast<uint64_t>(second) + layout.code_serial, b) && a != 0 && b == a + 1;
  if (second) py.decref(second);
  if (first) py.decref(first);
  py.err_restore(type, value, traceback);
  return ok;
}

// Checks, once, with the GIL held, that reading the interpreter's structures gives exactly the
// frames, lines and names the C API gives; decides how frames are read from then on.
void decide_reading(const PythonApi& py) {
  int expected = kUndecided;
  if (g_reading.load(std::memory_order_acquire) != kUndecided) return;
  std::optional<PythonLayout> layout = python_layout(py.minor, py.runtime);
  bool ok = false;
  std::string why;
  const char* direct = setting(env::kPythonLayout);
  if (direct && std::strcmp(direct, "0") == 0) {
    layout.reset();
    why = "MEMTRACE_PYTHON_LAYOUT=0 keeps memtrace to Python's C API";
  } else if (!layout) {
    why = "Python 3." + std::to_string(py.minor) + " is not a version memtrace reads frames of";
  } else {
    CheckedMemory m;
    uint64_t by_api[2 * 64];
    PythonFrame direct[64];
    int n_api = api_frames(py, 64, by_api, false);
    int n_direct =
        m.ok() ? read_frames(*layout, m, reinterpret_cast<uint64_t>(py.this_thread_state()), py.code_type, direct, 64)
               : -1;
    ok = n_api > 0 && n_api == n_direct;
    for (int i = 0; ok && i < n_api; ++i) {
      CodeFields c;
      ok = direct[i].code == by_api[2 * i] && read_code(*layout, m, direct[i].code, c);
      if (!ok) break;
      std::string table = read_bytes(*layout, m, c.linetable, 1 << 20);
      int line = python::line_of(layout->line_table, c.first_line, reinterpret_cast<const uint8_t*>(table.data()),
                                 table.size(), static_cast<int>(direct[i].offset));
      auto* code = reinterpret_cast<Object*>(direct[i].code);
      std::string name = attribute_text(py, code, layout->code_qualname != kAbsent ? "co_qualname" : "co_name");
      ok = line == static_cast<int>(by_api[2 * i + 1]) && read_text(*layout, m, c.name) == name &&
           read_text(*layout, m, c.filename) == attribute_text(py, code, "co_filename");
    }
    if (!ok) why = "memtrace could not read the frames of this Python 3." + std::to_string(py.minor) + " build";
  }
  if (ok && layout->code_serial != kAbsent && !serials_count_up(py, *layout)) layout->code_serial = kAbsent;
  if (ok) g_layout = *layout;
  if (ok) count_code_deaths(py, *layout);
  if (!g_reading.compare_exchange_strong(expected, ok ? kDirect : kApiOnly, std::memory_order_acq_rel)) return;
  if (!ok)
    publish_notice(why +
                   ": Python frames are recorded only for threads that hold the GIL, and not for PyTorch's tensors "
                   "(inside its allocator's lock, the C API is no safe way to read them).");
}

}  // namespace

void forget_described_code() {
  g_codes = new std::unordered_map<uint64_t, KnownCode>();  // the old one may be mid-change: left behind
  g_codes_generation.fetch_add(1, std::memory_order_relaxed);
  g_described_by_api = nullptr;  // the references stay: they are harmless
}

void look_for_python_again() { g_look_again.store(true, std::memory_order_relaxed); }

bool python_read_directly() { return g_reading.load(std::memory_order_relaxed) == kDirect; }

void capture_python(int max_frames, bool allow_api, StackCapture& stack, EvalLoops* loops) {
  const PythonApi* py = python_api();
  if (!py || !py->is_initialized()) return;
  int reading = g_reading.load(std::memory_order_acquire);
  if (reading == kUndecided && allow_api && py->gil_check()) {
    decide_reading(*py);
    reading = g_reading.load(std::memory_order_acquire);
  }
  if (reading == kDirect) {
    Object* tstate = py->this_thread_state();
    int calls = -1;
    const uint64_t generation = g_codes_generation.load(std::memory_order_relaxed);
    uint64_t deaths = 0;
    const bool counted = code_deaths(deaths);
    // Each frame's code id, for the walk to write into the stack's pairs as it reads them. Frames
    // are known only while code objects' deaths are counted (else each is looked up, and its code
    // object checked, in the code cache).
    struct {
      CachedCode* cache;
      KnownFrame* known;
      uint64_t generation;
      bool counted;
      uint64_t deaths;
      CodeOffsets offsets;  // a copy: the pairs' stores could alias the layout's
      uint64_t recall(const FrameKey& key) {
        if (!known) return 0;
        const KnownFrame& k = known_slot(known, key.frame);
        return k.frame == key.frame && k.code == key.code && k.instr_owner == instr_owner(key) ? k.id : 0;
      }
      uint64_t frame(const FrameKey& key) {
        const uint64_t id = code_id(key.code, offsets, cache, generation, counted, deaths);
        if (id && known) known_slot(known, key.frame) = KnownFrame{key.frame, key.code, instr_owner(key), id};
        return id;
      }
    } sink{code_cache(),         counted ? known_frames(generation, deaths) : nullptr, generation, counted, deaths,
           CodeOffsets(g_layout)};
    const int count = walk_frames_of(g_layout, DirectMemory(), reinterpret_cast<uint64_t>(tstate), py->code_type,
                                     stack.python, max_frames, sink, loops ? &calls : nullptr);
    if (loops && calls > 0 && py->loop_start && py->interpreter_of && py->frame_evaluator && tstate &&
        reinterpret_cast<uint64_t>(py->frame_evaluator(py->interpreter_of(tstate))) == py->loop_start)
      *loops = EvalLoops{calls, py->loop_start, py->loop_end};
    stack.python_count = static_cast<uint16_t>(count);
    stack.python_state = count ? ring::kPythonFrames : ring::kPythonNoFrames;
    return;
  }
  // No C API inside PyTorch's allocator (its tracker, or a cudaMalloc it makes under its lock), and
  // none without the GIL: the frames cannot be read.
  if (!allow_api || !py->gil_check() || inside_pytorch_allocator(stack.native, stack.native_count)) {
    stack.python_state = ring::kPythonNoGil;
    return;
  }
  stack.python_state = ring::kPythonFrames;
  stack.python_count = static_cast<uint16_t>(api_frames(*py, max_frames, stack.python, true));
}

}  // namespace memtrace::inject

using namespace memtrace::inject;

// The Python shim calls this at start-up, holding the GIL (ctypes.PyDLL), so that the frames of
// threads that do not hold it can be read from the first allocation on.
MEMTRACE_EXPORT int memtrace_python_ready() {
  if (const PythonApi* py = python_api(); py && py->gil_check()) decide_reading(*py);
  return g_reading.load(std::memory_order_acquire) == kDirect;
}
