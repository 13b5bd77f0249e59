#include "chunk_source.h"

#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <new>

#include "memtrace/format/framing.h"

namespace memtrace {

namespace {
constexpr unsigned char kEventsTag = (5 << 3) | 2;  // Chunk.events, length-delimited
}

ChunkSource::~ChunkSource() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void ChunkSource::prefetch() {
  if (!thread_.joinable()) thread_ = std::thread([this] { run_ahead(); });
}

void ChunkSource::run_ahead() {
  for (;;) {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [this] { return stop_ || produced_ < consumed_ + kAhead; });
    if (stop_) return;
    RawChunk& slot = ring_[produced_ % kAhead];
    lock.unlock();
    slot.out_of_memory = false;
    try {
      read(slot);  // the slot is neither the reader's nor visible to it until produced_ moves
    } catch (const std::bad_alloc&) {
      slot.out_of_memory = true;
      slot.status = RawChunk::Status::kEnd;
    }
    lock.lock();
    ++produced_;
    changed_.notify_all();
    if (slot.status != RawChunk::Status::kOk) return;  // nothing follows an end or a problem
  }
}

RawChunk& ChunkSource::next() {
  if (!thread_.joinable()) {
    read(current_);
    return current_;
  }
  std::unique_lock<std::mutex> lock(mutex_);
  if (holding_) {
    ++consumed_;
    holding_ = false;
    changed_.notify_all();
  }
  changed_.wait(lock, [this] { return produced_ > consumed_; });
  holding_ = true;
  if (ring_[consumed_ % kAhead].out_of_memory) throw std::bad_alloc();
  return ring_[consumed_ % kAhead];
}

size_t ChunkSource::fetch(void* into, size_t size) {
  if (!channel_) return std::fread(into, 1, size, file_);
  size_t got = 0;
  while (got < size) {
    if (item_read_ == item_.bytes.size()) {
      // Events inside a chunk's bytes: no writer puts them there; the chunk reads as cut.
      if (!channel_->take(item_) || item_.is_events) break;
      item_read_ = 0;
    }
    size_t n = std::min(size - got, item_.bytes.size() - item_read_);
    std::memcpy(static_cast<char*>(into) + got, item_.bytes.data() + item_read_, n);
    item_read_ += n;
    got += n;
  }
  return got;
}

size_t ChunkSource::read_bytes(void* into, size_t size) {
  size_t got = fetch(into, size);
  offset_ += got;
  return got;
}

void ChunkSource::read(RawChunk& out) {
  out.status = RawChunk::Status::kOk;
  out.offset = offset_;
  out.is_events = false;
  out.problem.clear();
  if (channel_ && item_read_ == item_.bytes.size()) {  // between chunks: events come as they are
    if (!channel_->take(item_)) {
      out.status = RawChunk::Status::kEnd;
      out.end_offset = offset_;
      return;
    }
    item_read_ = 0;
    if (item_.is_events) {
      out.events.swap(item_.events);  // the reader's old vector goes back to the writer
      out.is_events = true;
      out.end_offset = offset_;
      return;
    }
  }
  auto cut = [&](uint64_t at) {
    out.status = RawChunk::Status::kCut;
    out.end_offset = at;
    out.problem = "trace ends early at byte " + std::to_string(at) + "; read up to there";
  };
  auto fail = [&](uint64_t at, std::string what) {
    out.status = RawChunk::Status::kCorrupt;
    out.problem_offset = at;
    out.problem = std::move(what);
  };
  unsigned char head[framing::kChunkHeaderBytes];
  size_t got = fetch(head, sizeof head);
  if (got == 0 && (channel_ || std::feof(file_))) {  // clean end of file
    out.status = RawChunk::Status::kEnd;
    out.end_offset = offset_;
    return;
  }
  if (got < sizeof head) return cut(offset_ + got);
  const uint32_t length = framing::get_u32(head);
  if (length > framing::kMaxChunkBytes)
    return fail(offset_, "chunk length " + std::to_string(length) + " exceeds the limit of " +
                             std::to_string(framing::kMaxChunkBytes));
  const uint8_t codec = head[4];
  if ((codec != framing::kCodecNone && codec != framing::kCodecZstd) || head[5] || head[6] || head[7])
    return fail(offset_ + 4, "unknown chunk codec " + std::to_string(codec));
  // Knowing the size up front, a chunk that claims more than is left is a cut file, found out
  // before any memory is taken for it.
  if (file_size_ && offset_ + sizeof head + length > file_size_) return cut(file_size_);
  buffer_.resize(length);
  got = fetch(buffer_.data(), length);
  if (got < length) return cut(offset_ + sizeof head + got);
#ifndef MEMTRACE_FUZZ_NO_CHECKSUM  // the fuzz target skips it, to reach what lies behind it
  if (framing::crc32c(buffer_.data(), length) != framing::get_u32(head + 8))
    return fail(offset_, "chunk checksum mismatch (the file is damaged)");
#endif
  if (codec == framing::kCodecZstd) {
    // The frame says how large it unpacks to: refuse anything over the chunk limit before
    // unpacking, so a damaged size cannot make us allocate without bound.
    unsigned long long size = ZSTD_getFrameContentSize(buffer_.data(), buffer_.size());
    if (size == ZSTD_CONTENTSIZE_UNKNOWN || size == ZSTD_CONTENTSIZE_ERROR || size > framing::kMaxChunkBytes)
      return fail(offset_ + sizeof head, "compressed chunk with a bad or too large size");
    unpacked_.resize(size);
    size_t n = ZSTD_decompress(unpacked_.data(), unpacked_.size(), buffer_.data(), buffer_.size());
    if (ZSTD_isError(n) || n != size)
      return fail(offset_ + sizeof head, std::string("compressed chunk does not unpack: ") +
                                             (ZSTD_isError(n) ? ZSTD_getErrorName(n) : "wrong size"));
    buffer_.swap(unpacked_);
  }
  // An events chunk's batch, decoded (PROBLEM: what was wrong, if anything): its frees by
  // reference resolved, in the order of the trace.
  auto events_read = [&](std::string problem) {
    if (problem.empty() && !freed_.empty()) problem = references_.resolve(out.events, freed_);
    if (!problem.empty()) return fail(offset_, problem);
    out.is_events = true;
    offset_ += sizeof head + length;
    out.end_offset = offset_;
  };
  // Most chunks are events: decoded from their bytes (event_batch_wire.h), else parsed into a batch
  // kept from chunk to chunk, whose columns keep their capacity (a Chunk switching between kinds
  // would free and regrow them every time).
  const auto* p = reinterpret_cast<const unsigned char*>(buffer_.data());
  const auto* end = p + buffer_.size();
  if (buffer_.size() > 1 && *p == kEventsTag) {
    uint64_t field_bytes = 0;
    int shift = 0;
    for (++p; p < end && shift < 35;) {
      field_bytes |= static_cast<uint64_t>(*p & 0x7F) << shift;
      shift += 7;
      if (!(*p++ & 0x80)) break;
    }
    if (field_bytes == static_cast<uint64_t>(end - p)) {
      if (decode_event_batch_as_written(p, field_bytes, stacks_seen_, out.events, freed_)) return events_read({});
      if (!out.batch.ParseFromArray(p, static_cast<int>(field_bytes)))
        return fail(offset_ + sizeof head, "chunk does not parse");
      return events_read(decode_event_batch(out.batch, stacks_seen_, out.events, &freed_));
    }
  }
  if (!out.chunk.ParseFromString(buffer_)) return fail(offset_ + sizeof head, "chunk does not parse");
  if (out.chunk.has_events())  // an events chunk as another writer lays it out
    return events_read(decode_event_batch(out.chunk.events(), stacks_seen_, out.events, &freed_));
  if (out.chunk.has_stacks()) stacks_seen_ += static_cast<uint64_t>(out.chunk.stacks().stacks_size());
  offset_ += sizeof head + length;
  out.end_offset = offset_;
}

}  // namespace memtrace
