// The byte layout around the protobuf chunks: the file magic and each chunk's frame.
//   file   := magic(8) version(u32 LE) flags(u32 LE, 0: a reader refuses flags it does not know) chunk*
//   chunk  := length(u32 LE) codec(u8) reserved(3 bytes, zero) crc32c(u32 LE) payload(length)
// The payload is one serialized pb::Chunk: as is (codec 0) or as one zstd frame that records
// its decompressed size (codec 1). The checksum covers the payload as stored.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace memtrace::framing {

inline constexpr char kMagic[8] = {'M', 'E', 'M', 'T', 'R', 'A', 'C', 'E'};
inline constexpr uint32_t kFormatVersion = 2;
inline constexpr size_t kFileHeaderBytes = 16;
inline constexpr size_t kChunkHeaderBytes = 12;
// A reader never holds more than this for one chunk; a writer never writes a larger one.
inline constexpr uint32_t kMaxChunkBytes = 64u << 20;
// Nor more events in one batch: columns may be left out (all zero), so the count alone would
// otherwise say how much a reader allocates.
inline constexpr uint32_t kMaxBatchEvents = 1u << 16;
// What one trace can make a reader hold in its tables, whatever its chunks say (a stack chunk of
// one frame id repeated packs millions of ids into a few kilobytes): a stack has at most this
// many frames (the injector records 256 native and 128 Python frames, inlined frames add some),
// the string, frame and stack tables together at most this many bytes as held, and the header at
// most this many devices. A real trace's tables hold a few megabytes.
inline constexpr uint32_t kMaxStackFrames = 4096;
inline constexpr uint64_t kMaxTableBytes = 512ull << 20;
inline constexpr uint32_t kMaxDevices = 1024;
inline constexpr uint8_t kCodecNone = 0;
inline constexpr uint8_t kCodecZstd = 1;

uint32_t crc32c(const void* data, size_t size);

inline void put_u32(unsigned char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
inline uint32_t get_u32(const unsigned char* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

}  // namespace memtrace::framing
