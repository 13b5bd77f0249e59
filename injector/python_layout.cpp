#include "python_layout.h"

#include <cstring>

namespace memtrace::inject {
namespace {

PythonLayout frame_objects(int minor) {  // 3.9, 3.10
  PythonLayout l;
  l.minor = minor;
  l.tstate_frame = 24;
  l.frame_back = 24;
  l.frame_code = 32;
  l.frame_instr = minor == 9 ? 104 : 96;
  l.lasti_in_code_units = minor == 10;
  l.code_firstlineno = 40;
  l.code_filename = 104;
  l.code_name = 112;
  l.code_linetable = 120;
  l.line_table = minor == 9 ? python::LineTable::kLnotab : python::LineTable::kLinetable;
  l.ascii_size = 48;
  l.compact_size = 72;
  l.compact_utf8_length = 48;
  l.compact_utf8 = 56;
  return l;
}

// 3.13's _Py_DebugOffsets (Include/internal/pycore_runtime.h), as far as memtrace reads it.
struct DebugOffsets313 {
  char cookie[8];
  uint64_t version;
  uint64_t free_threaded;
  struct {
    uint64_t size, finalizing, interpreters_head;
  } runtime_state;
  struct {
    uint64_t size, id, next, threads_head, gc, imports_modules, sysdict, builtins, ceval_gil, gil_runtime_state,
        gil_runtime_state_enabled, gil_runtime_state_locked, gil_runtime_state_holder;
  } interpreter_state;
  struct {
    uint64_t size, prev, next, interp, current_frame, thread_id, native_thread_id, datastack_chunk, status;
  } thread_state;
  struct {
    uint64_t size, previous, executable, instr_ptr, localsplus, owner;
  } interpreter_frame;
  struct {
    uint64_t size, filename, name, qualname, linetable, firstlineno, argcount, localsplusnames, localspluskinds,
        co_code_adaptive;
  } code_object;
  struct {
    uint64_t size, ob_type;
  } pyobject;
  struct {
    uint64_t size, tp_name, tp_repr, tp_flags;
  } type_object;
  struct {
    uint64_t size, ob_item, ob_size;
  } tuple_object, list_object;
  struct {
    uint64_t size, ma_keys, ma_values;
  } dict_object;
  struct {
    uint64_t size, ob_fval;
  } float_object;
  struct {
    uint64_t size, lv_tag, ob_digit;
  } long_object;
  struct {
    uint64_t size, ob_size, ob_sval;
  } bytes_object;
  struct {
    uint64_t size, state, length, asciiobject_size;
  } unicode_object;
};

std::optional<PythonLayout> debug_offsets_313(const void* runtime) {
  if (!runtime) return std::nullopt;
  const auto* d = static_cast<const DebugOffsets313*>(runtime);
  if (std::memcmp(d->cookie, "xdebugpy", 8) != 0 || (d->version >> 16) != 0x030D) return std::nullopt;
  PythonLayout l;
  l.minor = 13;
  l.tstate_frame = d->thread_state.current_frame;
  l.frame_back = d->interpreter_frame.previous;
  l.frame_code = d->interpreter_frame.executable;
  l.frame_instr = d->interpreter_frame.instr_ptr;
  l.instr_is_pointer = true;
  l.frame_owner = static_cast<ptrdiff_t>(d->interpreter_frame.owner);
  l.loop_entry = PythonLayout::LoopEntry::kShim;
  l.code_firstlineno = d->code_object.firstlineno;
  l.code_filename = d->code_object.filename;
  l.code_name = d->code_object.name;
  l.code_qualname = static_cast<ptrdiff_t>(d->code_object.qualname);
  l.code_linetable = d->code_object.linetable;
  l.code_adaptive = static_cast<ptrdiff_t>(d->code_object.co_code_adaptive);
  // Not among the published offsets: known for the default build, left out (no check for
  // frames not yet started) for the free-threaded one.
  l.code_firsttraceable = d->free_threaded ? kAbsent : l.code_adaptive - 16;
  // Nor is co_version, the uint32 just before co_localsplusnames (Include/cpython/code.h: after
  // co_nfreevars), in either build.
  l.code_serial = static_cast<ptrdiff_t>(d->code_object.localsplusnames) - 4;
  l.line_table = python::LineTable::kLocations;
  l.ob_type = d->pyobject.ob_type;
  l.unicode_state = d->unicode_object.state;
  l.ascii_size = d->unicode_object.asciiobject_size;
  // PyCompactUnicodeObject: the ASCII header, then utf8_length and utf8.
  l.compact_utf8_length = l.ascii_size;
  l.compact_utf8 = l.ascii_size + 8;
  l.compact_size = l.ascii_size + 16;
  l.bytes_size = d->bytes_object.ob_size;
  l.bytes_data = d->bytes_object.ob_sval;
  return l;
}

}  // namespace

std::optional<PythonLayout> python_layout(int minor, const void* runtime) {
  switch (minor) {
    case 9:
    case 10: return frame_objects(minor);
    case 11:
    case 12: return interpreter_frames_layout(minor);
    case 13: return debug_offsets_313(runtime);
    default: return std::nullopt;
  }
}

}  // namespace memtrace::inject
