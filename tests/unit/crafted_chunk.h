// A crafted chunk appended to a trace, compressed as tightly as a crafted file packs it: how the
// readers' bounds are tested (tests/unit/format_test.cpp, tests/e2e/damaged_trace_test.cpp).
#pragma once

#include <zstd.h>

#include <ostream>
#include <string>

#include "memtrace.pb.h"
#include "memtrace/format/framing.h"

namespace memtrace::testing {

inline void append_crafted_chunk(std::ostream& out, const pb::Chunk& chunk) {
  const std::string body = chunk.SerializeAsString();
  std::string packed(ZSTD_compressBound(body.size()), '\0');
  packed.resize(ZSTD_compress(packed.data(), packed.size(), body.data(), body.size(), 3));
  unsigned char head[framing::kChunkHeaderBytes] = {};
  framing::put_u32(head, static_cast<uint32_t>(packed.size()));
  head[4] = framing::kCodecZstd;
  framing::put_u32(head + 8, framing::crc32c(packed.data(), packed.size()));
  out.write(reinterpret_cast<const char*>(head), sizeof head);
  out.write(packed.data(), static_cast<std::streamsize>(packed.size()));
}

}  // namespace memtrace::testing
