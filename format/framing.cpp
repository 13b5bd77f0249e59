#include "memtrace/format/framing.h"

#include <array>

namespace memtrace::framing {
namespace {

// CRC-32C (Castagnoli), reflected, as used by iSCSI and ext4: catches damaged chunks.
constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr auto kTable = make_table();

uint32_t crc32c_table(const unsigned char* p, size_t size, uint32_t c) {
  for (size_t i = 0; i < size; ++i) c = kTable[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c;
}

#if defined(__x86_64__)
// SSE4.2 computes the same CRC eight bytes an instruction: reading a trace checks every byte.
__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(const unsigned char* p, size_t size, uint32_t c) {
  uint64_t c64 = c;
  for (; size >= 8; p += 8, size -= 8) {
    uint64_t word;
    __builtin_memcpy(&word, p, 8);
    c64 = __builtin_ia32_crc32di(c64, word);
  }
  c = static_cast<uint32_t>(c64);
  for (; size; ++p, --size) c = __builtin_ia32_crc32qi(c, *p);
  return c;
}
#endif

}  // namespace

uint32_t crc32c(const void* data, size_t size) {
  auto p = static_cast<const unsigned char*>(data);
#if defined(__x86_64__)
  static const bool hardware = __builtin_cpu_supports("sse4.2");
  if (hardware) return crc32c_sse42(p, size, 0xFFFFFFFFu) ^ 0xFFFFFFFFu;
#endif
  return crc32c_table(p, size, 0xFFFFFFFFu) ^ 0xFFFFFFFFu;
}

}  // namespace memtrace::framing
