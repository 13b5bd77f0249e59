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

#include "memtrace/ring/protocol.h"
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

// A frame its sink did not recall: its code object must be one (its type PyCode_Type, at
// CODE_TYPE) and the frame started (3.11+: past the code's first traceable instruction; a
// generator's frame always is), then the sink's word for it (0: left out). Apart from the walk's
// loop, which it would crowd.
struct Sight {
  uint64_t word;
  bool complete;  // a started frame of a code object
};
template <typename Memory, typename Sink>
__attribute__((noinline)) Sight first_sight(const PythonLayout& l, const Memory& m, uint64_t code_type, Sink& sink,
                                            uint64_t frame, uint64_t code, uint64_t instr, char owner, int64_t offset) {
  const FrameKey key{frame, code, instr, owner};  // built here: in the walk's loop it was stored at every frame
  uint64_t type = 0;
  if (!load(m, key.code + l.ob_type, type) || type != code_type) return {0, false};
  int first_traceable = 0;
  if (l.instr_is_pointer && key.owner != 1 && l.code_firsttraceable != kAbsent &&
      load(m, key.code + static_cast<uint64_t>(l.code_firsttraceable), first_traceable) &&
      offset < 2 * static_cast<int64_t>(first_traceable))
    return {0, false};
  return {sink.frame(key), true};
}

// Where a frame's fields lie (0 for one the layout has not), and its code's instructions.
struct FrameFields {
  uint64_t code, back, instr, owner, is_entry, adaptive;
  constexpr bool operator==(const FrameFields&) const = default;
};
constexpr FrameFields frame_fields(const PythonLayout& l) {
  auto or_zero = [](ptrdiff_t offset) { return offset == kAbsent ? uint64_t(0) : static_cast<uint64_t>(offset); };
  return {l.frame_code,
          l.frame_back,
          l.frame_instr,
          or_zero(l.frame_owner),
          or_zero(l.frame_is_entry),
          or_zero(l.code_adaptive)};
}

// The walk for frames of one shape (the layout's loop_entry, which fixes the rest: 3.9 and 3.10
// chain PyFrameObjects, with an int f_lasti and no owner; 3.11+ _PyInterpreterFrames, with an
// instruction pointer and an owner), from the innermost FRAME: the loop tests none of it per frame,
// and keeps what it writes in registers (callgrind, 3.11: 81 instructions a frame with the shape
// tested at each, and the sink's count and the frame's key kept in memory; 50 now, with the
// compiled offsets and python_stack.cpp's sink).
template <PythonLayout::LoopEntry kEntry, int kFixedMinor, typename Memory, typename Sink>
int walk_shaped(const PythonLayout& l, const Memory& m, uint64_t frame, uint64_t code_type, uint64_t* pairs, int max,
                Sink& sink, int* loops) {
  using LoopEntry = PythonLayout::LoopEntry;
  constexpr bool kObjects = kEntry == LoopEntry::kEveryFrame;
  // KFIXED_MINOR: a version whose frames' fields the walk is compiled with (0: the layout's).
  constexpr FrameFields kFixed = kFixedMinor ? frame_fields(interpreter_frames_layout(kFixedMinor)) : FrameFields{};
  const FrameFields fields = kFixedMinor ? kFixed : frame_fields(l);
  const uint64_t frame_code = fields.code, frame_back = fields.back, frame_instr = fields.instr,
                 frame_owner = fields.owner, frame_is_entry = fields.is_entry, code_adaptive = fields.adaptive;
  const bool lasti_in_code_units = l.lasti_in_code_units;
  int n = 0, entries = 0;
  for (int guard = 0; plausible(frame) && n < max && guard < 100000; ++guard) {
    uint64_t code = 0, back = 0;
    if (!load(m, frame + frame_code, code) || !load(m, frame + frame_back, back)) break;
    char owner = 0;
    uint8_t entry = kObjects;  // 3.9, 3.10: ceval.c evaluates each frame in a call of its own
    if constexpr (!kObjects)
      if (!load(m, frame + frame_owner, owner)) break;
    if constexpr (kEntry == LoopEntry::kIsEntry)
      if (!load(m, frame + frame_is_entry, entry)) break;
    const bool shim = owner == 3;  // FRAME_OWNED_BY_CSTACK (3.12+): the C stack's entry into the interpreter
    if constexpr (kEntry == LoopEntry::kShim) {
      if (shim) {  // the shim stands just outside the call's outermost frame
        entry = 1;
        if (n > 0) pairs[2 * (n - 1)] |= ring::kEndsLoopCall;
      }
    }
    entries += entry != 0;
    if (!shim && plausible(code)) {
      // Where the frame stands: a pointer into the code's instructions (3.11+), or f_lasti.
      uint64_t instr = 0;
      int64_t offset = 0;
      if constexpr (kObjects) {
        int lasti = 0;
        if (!load(m, frame + frame_instr, lasti)) break;
        instr = static_cast<uint64_t>(static_cast<int64_t>(lasti));
        offset = lasti_in_code_units && lasti >= 0 ? 2 * static_cast<int64_t>(lasti) : lasti;
      } else {
        if (!load(m, frame + frame_instr, instr)) break;
        offset = static_cast<int64_t>(instr - (code + code_adaptive));
      }
      const bool ends_loop_call = kEntry != LoopEntry::kShim && entry != 0;
      const FrameKey key{frame, code, instr, owner};
      uint64_t word = sink.recall(key);
      if (!word) {
        const Sight sight = first_sight(l, m, code_type, sink, frame, code, instr, owner, offset);
        word = sight.word;
        // Left out: the call it ended now ends with the frame inside it.
        if (sight.complete && !word && ends_loop_call && n > 0) pairs[2 * (n - 1)] |= ring::kEndsLoopCall;
      }
      if (word) {
        pairs[2 * n] = word | (ends_loop_call ? ring::kEndsLoopCall : 0);
        pairs[2 * n + 1] = static_cast<uint64_t>(offset);
        ++n;
      }
    }
    frame = back;
  }
  if (loops && !plausible(frame)) *loops = entries;  // the whole chain was read
  return n;
}

// Walks the frames of the thread whose PyThreadState is TSTATE, innermost first, into PAIRS (at
// most MAX): for each frame a reader would show, a word its SINK gives and the byte offset of the
// instruction it stands at; the word's top bit (ring::kEndsLoopCall) set for the outermost frame
// of a call of the evaluation loop. sink.recall(key) gives the word of a frame it knows by its key
// (0: none), before the walk checks that the frame's code is a code object and that the frame has
// started (so it recalls only frames it knows hold the very code object it saw); else
// sink.frame(key) gives it, for a started frame of a code object (0: left out). Frames a
// reader would not show (C-stack shims, frames not started yet) are left out. CODE_TYPE is
// PyCode_Type's address: a frame whose code is anything else is not followed into. LOOPS, when
// given, is set to how many calls of the evaluation loop the frames began (the loop's frames on
// the native stack), or -1 when that is not known (more frames than MAX). Returns how many frames
// went into PAIRS. The sink works as each frame comes (python_stack.cpp).
template <typename Memory, typename Sink>
int walk_frames_of(const PythonLayout& l, const Memory& m, uint64_t tstate, uint64_t code_type, uint64_t* pairs,
                   int max, Sink& sink, int* loops = nullptr) {
  using LoopEntry = PythonLayout::LoopEntry;
  if (loops) *loops = -1;
  uint64_t frame = 0;
  if (!plausible(tstate) || !load(m, tstate + l.tstate_frame, frame)) return 0;
  if (l.cframe_current_frame != kAbsent && (!plausible(frame) || !load(m, frame + l.cframe_current_frame, frame)))
    return 0;
  // Each shape with what python_layout.cpp gives it; anything else is no layout memtrace knows.
  const bool objects = l.frame_owner == kAbsent && !l.instr_is_pointer;
  const bool interpreter_frames = l.frame_owner != kAbsent && l.instr_is_pointer && l.code_adaptive != kAbsent;
  // 3.11 (the only version whose frames say is_entry) and 3.12 with their own numbers, which the
  // walk is compiled with: in registers, the offsets crowded out what the loop works on
  // (callgrind: 63 instructions a frame, 57 this way). 3.13's come from the interpreter
  // (_Py_DebugOffsets).
  const FrameFields fields = frame_fields(l);
  constexpr FrameFields k311 = frame_fields(interpreter_frames_layout(11)),
                        k312 = frame_fields(interpreter_frames_layout(12));
  switch (l.loop_entry) {
    case LoopEntry::kEveryFrame:
      return objects ? walk_shaped<LoopEntry::kEveryFrame, 0>(l, m, frame, code_type, pairs, max, sink, loops) : 0;
    case LoopEntry::kIsEntry:
      return interpreter_frames && fields == k311
                 ? walk_shaped<LoopEntry::kIsEntry, 11>(l, m, frame, code_type, pairs, max, sink, loops)
                 : 0;
    case LoopEntry::kShim:
      if (!interpreter_frames) return 0;
      if (fields == k312) return walk_shaped<LoopEntry::kShim, 12>(l, m, frame, code_type, pairs, max, sink, loops);
      return walk_shaped<LoopEntry::kShim, 0>(l, m, frame, code_type, pairs, max, sink, loops);
  }
  return 0;
}

// One Python frame: its code object and the byte offset of the instruction it stands at (negative
// for a frame not started yet).
struct PythonFrame {  // no initializers: arrays of them are filled, not cleared, on every event
  uint64_t code;
  int64_t offset;
  bool ends_loop_call;  // the outermost frame of a call of the evaluation loop
};

// The frames walk_frames_of gives, into OUT (at most MAX, at most 64), innermost first.
template <typename Memory>
int read_frames(const PythonLayout& l, const Memory& m, uint64_t tstate, uint64_t code_type, PythonFrame* out, int max,
                int* loops = nullptr) {
  struct {
    uint64_t recall(const FrameKey&) { return 0; }
    uint64_t frame(const FrameKey& key) { return key.code; }  // never 0 (plausible)
  } sink;
  uint64_t pairs[2 * 64];
  const int n = walk_frames_of(l, m, tstate, code_type, pairs, max < 64 ? max : 64, sink, loops);
  for (int i = 0; i < n; ++i)
    out[i] = PythonFrame{pairs[2 * i] & ~ring::kEndsLoopCall, static_cast<int64_t>(pairs[2 * i + 1]),
                         (pairs[2 * i] & ring::kEndsLoopCall) != 0};
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
