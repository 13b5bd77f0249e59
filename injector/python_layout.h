// Where CPython keeps a thread's frames, per minor version: the offsets memtrace reads the
// interpreter's structures at, without the GIL, to take the Python frames of a thread that
// released it (as PyTorch does around every op). 3.9 and 3.10 chain PyFrameObjects; 3.11 and
// 3.12 chain _PyInterpreterFrames from the thread's _PyCFrame; 3.13 publishes its own offsets
// (_Py_DebugOffsets, at the start of _PyRuntime), which are read from the running interpreter.
// The numbers come from each version's headers (offsetof), and are checked against the running
// interpreter before they are used (python_stack.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "memtrace/ring/python_lines.h"

namespace memtrace::inject {

inline constexpr ptrdiff_t kAbsent = -1;

struct PythonLayout {
  int minor = 0;  // 3.MINOR
  // PyThreadState -> the innermost frame: at tstate_frame, or (3.11, 3.12) a _PyCFrame pointer at
  // tstate_frame whose current_frame is at cframe_current_frame.
  size_t tstate_frame = 0;
  ptrdiff_t cframe_current_frame = kAbsent;
  // A frame: the next outer one, its code object, and where it stands: f_lasti, an int (3.9:
  // bytes; 3.10: code units), or (3.11+) a pointer into the code's instructions.
  size_t frame_back = 0, frame_code = 0, frame_instr = 0;
  bool instr_is_pointer = false;
  bool lasti_in_code_units = false;
  ptrdiff_t frame_owner = kAbsent;  // 3.11+: a char; generator-owned frames, C-stack shims
  // How a frame tells that a call of the evaluation loop (_PyEval_EvalFrameDefault) began there,
  // which puts one frame of that function on the native stack: every frame does (3.9, 3.10:
  // ceval.c evaluates each frame in a call of its own); the frame's is_entry (3.11: set by the
  // loop on the frame it starts with, Python/ceval.c); a C-stack shim frame (3.12, 3.13: the
  // loop's entry_frame, owner FRAME_OWNED_BY_CSTACK).
  enum class LoopEntry { kEveryFrame, kIsEntry, kShim } loop_entry = LoopEntry::kEveryFrame;
  ptrdiff_t frame_is_entry = kAbsent;  // 3.11: a bool
  // A code object.
  size_t code_filename = 0, code_name = 0, code_firstlineno = 0, code_linetable = 0;
  ptrdiff_t code_qualname = kAbsent;        // 3.11+
  ptrdiff_t code_adaptive = kAbsent;        // 3.11+: the instructions
  ptrdiff_t code_firsttraceable = kAbsent;  // 3.11+: an int, in code units
  // 3.12+: co_version, a uint32 the interpreter numbers code objects by as it makes them
  // (Objects/codeobject.c, init_code: the next number, 0 once 2^32 were made), which tells one
  // from a dead one at the same address; older versions have nothing that does.
  ptrdiff_t code_serial = kAbsent;
  python::LineTable line_table = python::LineTable::kLines;
  // Objects.
  size_t ob_type = 8;
  size_t unicode_state = 32, ascii_size = 0, compact_size = 0, compact_utf8 = 0, compact_utf8_length = 0;
  size_t bytes_size = 16, bytes_data = 32;
};

// The layout of 3.11 and 3.12 (their headers' offsets): constant, for the walk of frames to be
// compiled with its numbers (python_reader.h).
constexpr PythonLayout interpreter_frames_layout(int minor) {
  PythonLayout l;
  l.minor = minor;
  l.tstate_frame = 56;  // tstate->cframe
  l.cframe_current_frame = minor == 11 ? 8 : 0;
  l.frame_code = minor == 11 ? 32 : 0;
  l.frame_back = minor == 11 ? 48 : 8;
  l.frame_instr = 56;
  l.instr_is_pointer = true;
  l.frame_owner = minor == 11 ? 69 : 70;
  l.loop_entry = minor == 11 ? PythonLayout::LoopEntry::kIsEntry : PythonLayout::LoopEntry::kShim;
  l.frame_is_entry = minor == 11 ? 68 : kAbsent;  // Include/internal/pycore_frame.h: bool is_entry; char owner;
  l.code_firstlineno = minor == 11 ? 72 : 68;
  l.code_filename = 112;
  l.code_name = 120;
  l.code_qualname = 128;
  l.code_linetable = 136;
  l.code_firsttraceable = minor == 11 ? 168 : 176;
  l.code_adaptive = minor == 11 ? 184 : 192;
  l.code_serial = minor == 11 ? kAbsent : 92;
  l.line_table = python::LineTable::kLocations;
  l.ascii_size = minor == 11 ? 48 : 40;
  l.compact_size = minor == 11 ? 72 : 56;
  l.compact_utf8_length = minor == 11 ? 48 : 40;
  l.compact_utf8 = minor == 11 ? 56 : 48;
  return l;
}

// The layout of CPython 3.MINOR (release builds, x86-64); for 3.13, from the interpreter's own
// _Py_DebugOffsets at RUNTIME (the address of _PyRuntime). None for a version memtrace does not
// know.
std::optional<PythonLayout> python_layout(int minor, const void* runtime);

}  // namespace memtrace::inject
