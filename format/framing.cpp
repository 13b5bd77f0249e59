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

}  // namespace

uint32_t crc32c(const void* data, size_t size) {
  auto p = static_cast<const unsigned char*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) c = kTable[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

}  // namespace memtrace::framing
