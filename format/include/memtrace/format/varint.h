// Varints and zig-zag, as protobuf writes them: the trace's event columns, and the spill file a
// PyTorch snapshot's import writes its entries to.
#pragma once

#include <cstddef>
#include <cstdint>

namespace memtrace {

// Writes VALUE at P (at most 10 bytes); returns what follows it.
template <typename Byte>
inline Byte* put_varint(Byte* p, uint64_t value) {
  static_assert(sizeof(Byte) == 1);
  while (value >= 0x80) {
    *p++ = static_cast<Byte>(value | 0x80);
    value >>= 7;
  }
  *p++ = static_cast<Byte>(value);
  return p;
}

// How many bytes put_varint writes for VALUE.
inline size_t varint_bytes(uint64_t value) {
  size_t n = 1;
  while (value >= 0x80) {
    value >>= 7;
    ++n;
  }
  return n;
}

// Small magnitudes, of either sign, as small numbers: sint64 and sint32.
inline uint64_t zigzag(int64_t v) { return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63); }
inline uint64_t zigzag(int32_t v) {
  return static_cast<uint32_t>((static_cast<uint32_t>(v) << 1) ^ static_cast<uint32_t>(v >> 31));
}
inline int64_t unzigzag(uint64_t z) { return static_cast<int64_t>((z >> 1) ^ (0ull - (z & 1))); }

}  // namespace memtrace
