// Reading a thread's Python frames, code objects and strings straight from the interpreter's
// memory, by the offsets of python_layout.h: no reference counts, no allocation, no call that
// needs the GIL. The thread is inside memtrace's interposer, so its own frames stand still.
//
// Reads go through a Memory: DirectMemory loads (once the layout has been checked against the
// running interpreter), CheckedMemory asks the kernel to copy (a bad address is an error, not a
// crash), for that check.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "python_layout.h"

namespace memtrace::inject {

// Whether POINTER, read from the interpreter's memory, may be followed: not null, nor a small
// number. Checked once for each pointer read, not at each load from the object it points to (a
// field's address lies past its object's): callgrind counted 20 instructions a frame for the
// check at every load.
inline bool plausible(uint64_t pointer) { return pointer >= 4096; }

struct DirectMemory {
  bool read(uint64_t address, void* out, size_t bytes) const {
    std::memcpy(out, reinterpret_cast<const void*>(address), bytes);
    return true;
  }
};

// Copies through a pipe: write() of an unreadable address fails with EFAULT.
class CheckedMemory {
 public:
  CheckedMemory() {
    if (::pipe(fds_) != 0) fds_[0] = fds_[1] = -1;
  }
  ~CheckedMemory() {
    if (fds_[0] >= 0) ::close(fds_[0]);
    if (fds_[1] >= 0) ::close(fds_[1]);
  }
  CheckedMemory(const CheckedMemory&) = delete;
  CheckedMemory& operator=(const CheckedMemory&) = delete;
  bool ok() const { return fds_[0] >= 0; }

  bool read(uint64_t address, void* out, size_t bytes) const {
    auto* to = static_cast<char*>(out);
    while (bytes > 0) {
      size_t chunk = bytes < 4096 ? bytes : 4096;  // the pipe's buffer holds it whole
      ssize_t n = ::write(fds_[1], reinterpret_cast<const void*>(address), chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0 || ::read(fds_[0], to, static_cast<size_t>(n)) != n) return false;
      address += static_cast<uint64_t>(n);
      to += n;
      bytes -= static_cast<size_t>(n);
    }
    return true;
  }

 private:
  int fds_[2] = {-1, -1};
};

template <typename Memory, typename T>
bool load(const Memory& m, uint64_t address, T& out) {
  return m.read(address, &out, sizeof out);
}

// One Python frame: its code object and the byte offset of the instruction it stands at (negative
// for a frame not started yet).
struct PythonFrame {  // no initializers: arrays of them are filled, not cleared, on every event
  uint64_t code;
  int64_t offset;
  bool ends_loop_call;  // the outermost frame of a call of the evaluation loop
};

// The frames of the thread whose PyThreadState is TSTATE, innermost first, at most MAX; frames a
// reader would not show (C-stack shims, frames not started yet) are left out. CODE_TYPE is
// PyCode_Type's address: a frame whose code is anything else is not followed into. LOOPS, when
// given, is set to how many calls of the evaluation loop the frames began (the loop's frames on
// the native stack), or -1 when that is not known (more frames than MAX); the outermost frame of
// each such call says so (ends_loop_call).
template <typename Memory>
int read_frames(const PythonLayout& l, const Memory& m, uint64_t tstate, uint64_t code_type, PythonFrame* out, int max,
                int* loops = nullptr) {
  if (loops) *loops = -1;
  uint64_t frame = 0;
  if (!plausible(tstate) || !load(m, tstate + l.tstate_frame, frame)) return 0;
  if (l.cframe_current_frame != kAbsent && (!plausible(frame) || !load(m, frame + l.cframe_current_frame, frame)))
    return 0;
  // The offsets in registers: every store to OUT could alias the layout, which would otherwise be
  // read again for each frame (callgrind: the loop took ~80 instructions a frame that way).
  const uint64_t frame_code = l.frame_code, frame_back = l.frame_back, frame_instr = l.frame_instr, ob_type = l.ob_type;
  const bool has_owner = l.frame_owner != kAbsent, instr_is_pointer = l.instr_is_pointer,
             lasti_in_code_units = l.lasti_in_code_units, has_first_traceable = l.code_firsttraceable != kAbsent;
  const uint64_t frame_owner = static_cast<uint64_t>(l.frame_owner),
                 code_adaptive = static_cast<uint64_t>(l.code_adaptive),
                 code_firsttraceable = static_cast<uint64_t>(l.code_firsttraceable),
                 frame_is_entry = static_cast<uint64_t>(l.frame_is_entry);
  const bool every_frame = l.loop_entry == PythonLayout::LoopEntry::kEveryFrame,
             by_shim = l.loop_entry == PythonLayout::LoopEntry::kShim,
             by_flag = l.loop_entry == PythonLayout::LoopEntry::kIsEntry;
  int n = 0, entries = 0;
  for (int guard = 0; plausible(frame) && n < max && guard < 100000; ++guard) {
    uint64_t code = 0, back = 0, type = 0;
    if (!load(m, frame + frame_code, code) || !load(m, frame + frame_back, back)) break;
    char owner = 0;
    if (has_owner && !load(m, frame + frame_owner, owner)) break;
    const bool shim = owner == 3;  // FRAME_OWNED_BY_CSTACK (3.12+): the C stack's entry into the interpreter
    uint8_t entry = every_frame;
    if (by_flag && !load(m, frame + frame_is_entry, entry)) break;
    if (by_shim && shim) {  // 3.12+: the shim stands just outside the call's outermost frame
      entry = 1;
      if (n > 0) out[n - 1].ends_loop_call = true;
    }
    entries += entry != 0;
    if (!shim && plausible(code) && load(m, code + ob_type, type) && type == code_type) {
      int64_t offset = 0;
      bool complete = true;
      if (instr_is_pointer) {
        uint64_t instr = 0;
        if (!load(m, frame + frame_instr, instr)) break;
        offset = static_cast<int64_t>(instr - (code + code_adaptive));
        int first_traceable = 0;
        if (owner != 1 && has_first_traceable &&  // 1: owned by a generator, always started
            load(m, code + code_firsttraceable, first_traceable))
          complete = offset >= 2 * static_cast<int64_t>(first_traceable);
      } else {
        int lasti = 0;
        if (!load(m, frame + frame_instr, lasti)) break;
        offset = lasti_in_code_units && lasti >= 0 ? 2 * static_cast<int64_t>(lasti) : lasti;
      }
      if (complete) out[n++] = PythonFrame{code, offset, entry != 0 && !by_shim};
    }
    frame = back;
  }
  if (loops && !plausible(frame)) *loops = entries;  // the whole chain was read
  return n;
}

// A str as UTF-8, at most MAX_BYTES; empty when it is not one memtrace can read (not compact).
template <typename Memory>
std::string read_text(const PythonLayout& l, const Memory& m, uint64_t object, size_t max_bytes = 4096) {
  uint32_t state = 0;
  int64_t length = 0;
  if (!plausible(object) || !load(m, object + l.unicode_state, state) || !load(m, object + l.ob_type + 8, length) ||
      length < 0)
    return {};
  const unsigned kind = (state >> 2) & 7, compact = (state >> 5) & 1, ascii = (state >> 6) & 1;
  if (!compact) return {};
  std::string out;
  if (ascii) {
    out.resize(static_cast<size_t>(length) < max_bytes ? static_cast<size_t>(length) : max_bytes);
    return m.read(object + l.ascii_size, out.data(), out.size()) ? out : std::string();
  }
  uint64_t utf8 = 0;
  int64_t utf8_length = 0;
  if (load(m, object + l.compact_utf8, utf8) && plausible(utf8) &&
      load(m, object + l.compact_utf8_length, utf8_length) && utf8_length >= 0) {
    out.resize(static_cast<size_t>(utf8_length) < max_bytes ? static_cast<size_t>(utf8_length) : max_bytes);
    return m.read(utf8, out.data(), out.size()) ? out : std::string();
  }
  // UCS1, UCS2 or UCS4 code points after the compact header, as UTF-8.
  if (kind != 1 && kind != 2 && kind != 4) return {};
  for (int64_t i = 0; i < length && out.size() + 4 <= max_bytes; ++i) {
    uint32_t c = 0;
    if (!m.read(object + l.compact_size + static_cast<uint64_t>(i) * kind, &c, kind)) return {};
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else if (c < 0x800) {
      out += static_cast<char>(0xC0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 63));
    } else if (c < 0x10000) {
      out += static_cast<char>(0xE0 | (c >> 12));
      out += static_cast<char>(0x80 | ((c >> 6) & 63));
      out += static_cast<char>(0x80 | (c & 63));
    } else {
      out += static_cast<char>(0xF0 | (c >> 18));
      out += static_cast<char>(0x80 | ((c >> 12) & 63));
      out += static_cast<char>(0x80 | ((c >> 6) & 63));
      out += static_cast<char>(0x80 | (c & 63));
    }
  }
  return out;
}

// A bytes object's contents, at most MAX_BYTES.
template <typename Memory>
std::string read_bytes(const PythonLayout& l, const Memory& m, uint64_t object, size_t max_bytes) {
  int64_t size = 0;
  if (!plausible(object) || !load(m, object + l.bytes_size, size) || size < 0) return {};
  std::string out(static_cast<size_t>(size) < max_bytes ? static_cast<size_t>(size) : max_bytes, '\0');
  return m.read(object + l.bytes_data, out.data(), out.size()) ? out : std::string();
}

// What a code object is, as memtrace describes it.
struct CodeFields {
  uint64_t filename = 0, name = 0, linetable = 0;
  int32_t first_line = 0;
};

template <typename Memory>
bool read_code(const PythonLayout& l, const Memory& m, uint64_t code, CodeFields& out) {
  return plausible(code) && load(m, code + l.code_filename, out.filename) &&
         load(m, code + (l.code_qualname != kAbsent ? static_cast<uint64_t>(l.code_qualname) : l.code_name),
              out.name) &&
         load(m, code + l.code_linetable, out.linetable) && load(m, code + l.code_firstlineno, out.first_line);
}

}  // namespace memtrace::inject
