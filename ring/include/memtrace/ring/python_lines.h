// Python line numbers from a code object's line table and an instruction's byte offset, as
// CPython computes them (PyCode_Addr2Line), for the three table formats of 3.9 to 3.13. The
// injector records (code object, byte offset) and describes each code object once with its table;
// the collector turns offsets into lines here. The injector uses it too, once, to check that it
// reads the running interpreter's frames right.
#pragma once

#include <cstddef>
#include <cstdint>

namespace memtrace::python {

enum class LineTable : uint8_t {
  kLines = 0,      // no table: the recorded "offset" is already the line (frames taken with the GIL)
  kLnotab = 1,     // 3.9's co_lnotab: (byte increment, signed line increment) pairs
  kLinetable = 2,  // 3.10's co_linetable: (byte span, signed line delta; -128: no line) pairs
  kLocations = 3,  // 3.11+'s co_linetable: the location table (Objects/locations.md)
};

namespace detail {

inline int read_varint(const uint8_t*& p, const uint8_t* end) {
  if (p >= end) return 0;
  unsigned read = *p++;
  unsigned value = read & 63, shift = 0;
  while ((read & 64) && p < end && shift < 24) {
    read = *p++;
    shift += 6;
    value |= (read & 63) << shift;
  }
  return static_cast<int>(value);
}

inline int read_signed_varint(const uint8_t*& p, const uint8_t* end) {
  unsigned value = static_cast<unsigned>(read_varint(p, end));
  return value & 1 ? -static_cast<int>(value >> 1) : static_cast<int>(value >> 1);
}

}  // namespace detail

// The line of the instruction at byte OFFSET; FIRST_LINE (the code's co_firstlineno) when the
// table says nothing of it, and -1 where the table says the instruction has no line.
inline int line_of(LineTable format, int first_line, const uint8_t* table, size_t size, int offset) {
  const uint8_t* p = table;
  const uint8_t* end = table + size;
  if (format != LineTable::kLines && offset < 0) return first_line;  // a frame not started yet
  switch (format) {
    case LineTable::kLines: return offset;
    case LineTable::kLnotab: {
      int line = first_line, addr = 0;
      for (; p + 1 < end; p += 2) {
        addr += p[0];
        if (addr > offset) break;
        line += static_cast<int8_t>(p[1]);
      }
      return line;
    }
    case LineTable::kLinetable: {
      int line = first_line, start = 0, end_addr = 0, result = -1;
      for (; p + 1 < end; p += 2) {
        start = end_addr;
        end_addr += p[0];
        int delta = static_cast<int8_t>(p[1]);
        if (delta != -128) line += delta;
        result = delta == -128 ? -1 : line;
        if (offset >= start && offset < end_addr) return result;
      }
      return first_line;
    }
    case LineTable::kLocations: {
      int line = first_line, end_addr = 0;
      while (p < end) {
        const uint8_t first = *p++;
        const int code = (first >> 3) & 15;
        const int start = end_addr;
        end_addr += ((first & 7) + 1) * 2;  // code units of 2 bytes
        int delta = 0;
        if (code == 14 || code == 13)  // long form, or no columns: a signed varint line delta
          delta = detail::read_signed_varint(p, end);
        else if (code >= 10 && code <= 12)  // one line forms
          delta = code - 10;
        if (code != 15) line += delta;
        if (offset >= start && offset < end_addr) return code == 15 ? -1 : line;
        while (p < end && !(*p & 128)) ++p;  // the rest of this entry
      }
      return first_line;
    }
  }
  return first_line;
}

}  // namespace memtrace::python
