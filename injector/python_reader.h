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

// What a frame's code and offset follow from: the frame, its code object, where it stands (the
// instruction pointer, or f_lasti) and who owns it. The same key, the same code object at that
// address (its sink checks that), the same code, offset and start (a frame not started yet is
// left out).
struct FrameKey {
  uint64_t frame, code, instr;
  char owner;
};

// Walks the frames of the thread whose PyThreadState is TSTATE, innermost first, and hands SINK
// each one a reader would show, at most MAX: sink.frame(code, offset, ends_loop_call, key) for a
// frame of code object CODE standing at byte OFFSET (its outermost of a call of the evaluation
// loop when ENDS_LOOP_CALL), and sink.loop_call_ends() when the frame handed last turns out to be
// one (3.12+: the shim after it says so). A sink that remembers frames by their key may take one
// as it knows it, before the walk checks that the frame's code is a code object and that the
// frame has started (so it recalls only frames it knows hold the very code object it saw):
// sink.recall(key, offset, ends_loop_call) returns true when it did. Frames a reader would not
// show (C-stack shims, frames not started yet) are left out. CODE_TYPE is PyCode_Type's address: a
// frame whose code is anything else is not followed into. LOOPS, when given, is set to how many
// calls of the evaluation loop the frames began (the loop's frames on the native stack), or -1
// when that is not known (more frames than MAX). Returns how many frames SINK was handed. The sink
// does its work as each frame comes (python_stack.cpp): no array of frames between the walk and it.
template <typename Memory, typename Sink>
int walk_frames_of(const PythonLayout& l, const Memory& m, uint64_t tstate, uint64_t code_type, int max, Sink& sink,
                   int* loops = nullptr) {
  if (loops) *loops = -1;
  uint64_t frame = 0;
  if (!plausible(tstate) || !load(m, tstate + l.tstate_frame, frame)) return 0;
  if (l.cframe_current_frame != kAbsent && (!plausible(frame) || !load(m, frame + l.cframe_current_frame, frame)))
    return 0;
  // The offsets in registers: every store the sink makes could alias the layout, which would
  // otherwise be read again for each frame (callgrind: the loop took ~80 instructions a frame that way).
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
      if (n > 0) sink.loop_call_ends();
    }
    entries += entry != 0;
    if (!shim && plausible(code)) {
      // Where the frame stands: a pointer into the code's instructions (3.11+), or f_lasti.
      uint64_t instr = 0;
      int64_t offset = 0;
      if (instr_is_pointer) {
        if (!load(m, frame + frame_instr, instr)) break;
        offset = static_cast<int64_t>(instr - (code + code_adaptive));
      } else {
        int lasti = 0;
        if (!load(m, frame + frame_instr, lasti)) break;
        instr = static_cast<uint64_t>(static_cast<int64_t>(lasti));
        offset = lasti_in_code_units && lasti >= 0 ? 2 * static_cast<int64_t>(lasti) : lasti;
      }
      const bool ends_loop_call = entry != 0 && !by_shim;
      const FrameKey key{frame, code, instr, owner};
      if (sink.recall(key, offset, ends_loop_call)) {
        ++n;
      } else if (load(m, code + ob_type, type) && type == code_type) {
        bool complete = true;
        int first_traceable = 0;
        if (instr_is_pointer && owner != 1 && has_first_traceable &&  // 1: owned by a generator, always started
            load(m, code + code_firsttraceable, first_traceable))
          complete = offset >= 2 * static_cast<int64_t>(first_traceable);
        if (complete) {
          sink.frame(code, offset, ends_loop_call, key);
          ++n;
        }
      }
    }
    frame = back;
  }
  if (loops && !plausible(frame)) *loops = entries;  // the whole chain was read
  return n;
}

// One Python frame: its code object and the byte offset of the instruction it stands at (negative
// for a frame not started yet).
struct PythonFrame {  // no initializers: arrays of them are filled, not cleared, on every event
  uint64_t code;
  int64_t offset;
  bool ends_loop_call;  // the outermost frame of a call of the evaluation loop
};

// The frames walk_frames_of hands a sink, into OUT (at most MAX), innermost first.
template <typename Memory>
int read_frames(const PythonLayout& l, const Memory& m, uint64_t tstate, uint64_t code_type, PythonFrame* out, int max,
                int* loops = nullptr) {
  struct {
    PythonFrame* out;
    int n;
    bool recall(const FrameKey&, int64_t, bool) { return false; }
    void frame(uint64_t code, int64_t offset, bool ends_loop_call, const FrameKey&) {
      out[n++] = PythonFrame{code, offset, ends_loop_call};
    }
    void loop_call_ends() { out[n - 1].ends_loop_call = true; }
  } sink{out, 0};
  return walk_frames_of(l, m, tstate, code_type, max, sink, loops);
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

// Where those fields lie in a code object (the name is the qualified one where there is one),
// and what code_identity reads.
struct CodeOffsets {
  uint64_t filename, name, linetable, first_line;
  bool has_serial;
  uint64_t serial;
  uint64_t str_length, str_state, str_data, bytes_size;
  explicit CodeOffsets(const PythonLayout& l)
      : filename(l.code_filename),
        name(l.code_qualname != kAbsent ? static_cast<uint64_t>(l.code_qualname) : l.code_name),
        linetable(l.code_linetable),
        first_line(l.code_firstlineno),
        has_serial(l.code_serial != kAbsent),
        serial(static_cast<uint64_t>(l.code_serial)),
        str_length(l.ob_type + 8),
        str_state(l.unicode_state),
        str_data(l.ascii_size),
        bytes_size(l.bytes_size) {}
};

template <typename Memory>
bool read_code(const CodeOffsets& o, const Memory& m, uint64_t code, CodeFields& out) {
  return plausible(code) && load(m, code + o.filename, out.filename) && load(m, code + o.name, out.name) &&
         load(m, code + o.linetable, out.linetable) && load(m, code + o.first_line, out.first_line);
}

// The length of the str at OBJECT and the last 8 bytes of its contents (8 bytes at its start when
// shorter: pymalloc's 16-byte blocks hold them); 0 for one whose text lies elsewhere (not compact).
template <typename Memory>
uint64_t text_sample(const CodeOffsets& o, const Memory& m, uint64_t object) {
  int64_t length = 0;
  uint64_t tail = 0;
  uint32_t state = 0;
  if (!plausible(object) || !load(m, object + o.str_state, state) || !((state >> 5) & 1) ||
      !load(m, object + o.str_length, length) || length < 0 || length > (int64_t(1) << 40) ||
      !load(m, object + o.str_data + static_cast<uint64_t>(length < 8 ? 0 : length - 8), tail))
    return 0;
  return tail ^ static_cast<uint64_t>(length);
}

// code_identity where the code object has no serial: its fields, its file name's length and last
// 8 bytes, and its line table's length.
template <typename Memory>
inline uint64_t code_identity_by_fields(const CodeOffsets& o, const Memory& m, uint64_t code) {
  CodeFields c;
  int64_t table_length = 0;
  if (!read_code(o, m, code, c) || !plausible(c.linetable) || !load(m, c.linetable + o.bytes_size, table_length))
    return 0;
  const uint64_t print = (c.linetable ^ static_cast<uint64_t>(table_length) << 48) * 0x9E3779B97F4A7C15ull ^
                         (c.filename ^ text_sample(o, m, c.filename)) * 0xC2B2AE3D27D4EB4Full ^ c.name ^
                         static_cast<uint64_t>(static_cast<uint32_t>(c.first_line)) << 40;
  return (print & ~(uint64_t(1) << 63)) | 1;  // never 0, never a serial's
}

// What tells the code object at CODE from another that lived at that address before it: its
// co_version (3.12+), or, where there is none (or it is 0), its fields and samples of their texts.
// Two objects at one address with the same fields are not enough: a notebook cell's code, its file
// name and its line table are often made where the last cell's lay, once those died. Before 3.12,
// code whose name, or line table at the same length, is all that differs from the dead code's at
// its address, under the same file name, is not told apart (reading more of each text would cost
// every frame of every stack). 0: CODE could not be read.
template <typename Memory>
inline uint64_t code_identity(const CodeOffsets& o, const Memory& m, uint64_t code) {
  if (!plausible(code)) return 0;
  if (o.has_serial) {
    uint32_t serial = 0;
    if (!load(m, code + o.serial, serial)) return 0;
    if (serial) return uint64_t(1) << 63 | serial;
  }
  return code_identity_by_fields(o, m, code);
}

template <typename Memory>
bool read_code(const PythonLayout& l, const Memory& m, uint64_t code, CodeFields& out) {
  return read_code(CodeOffsets(l), m, code, out);
}

}  // namespace memtrace::inject
