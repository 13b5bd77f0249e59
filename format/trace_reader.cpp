#include "memtrace/format/trace_reader.h"

#include <cerrno>
#include <cstring>

#include "memtrace/format/framing.h"

#include <zstd.h>

namespace memtrace {

std::unique_ptr<TraceReader> TraceReader::open(const std::string& path, std::string& error) {
  std::FILE* file = std::fopen(path.c_str(), "rbe");
  if (!file) {
    error = "cannot open " + path + ": " + std::strerror(errno);
    return nullptr;
  }
  return open(file, path, error);
}

std::unique_ptr<TraceReader> TraceReader::open(std::FILE* file, const std::string& path, std::string& error) {
  std::unique_ptr<TraceReader> reader(new TraceReader(file, path));
  // Knowing the size up front, a chunk that claims more than is left is a cut file, found out
  // before any memory is taken for it. (A pipe has no size: then only the chunk limit holds.)
  if (std::fseek(file, 0, SEEK_END) == 0) {
    long end = std::ftell(file);
    if (end >= 0) reader->file_size_ = static_cast<uint64_t>(end);
    std::rewind(file);
  }
  unsigned char head[framing::kFileHeaderBytes];
  size_t got = std::fread(head, 1, sizeof head, file);
  if (got < sizeof framing::kMagic || std::memcmp(head, framing::kMagic, sizeof framing::kMagic) != 0) {
    error = path + " is not a memtrace trace (no MEMTRACE magic at byte 0)";
    return nullptr;
  }
  if (got < sizeof head) {
    error = path + ": trace ends early at byte " + std::to_string(got) + ", inside the file header";
    return nullptr;
  }
  uint32_t version = framing::get_u32(head + 8);
  if (version > framing::kFormatVersion) {
    error = path + " is a version " + std::to_string(version) + " trace; this memtrace reads versions up to " +
            std::to_string(framing::kFormatVersion) + ": update memtrace to read it";
    return nullptr;
  }
  if (framing::get_u32(head + 12) != 0) {
    error = path + ": byte 12: unknown file flags " + std::to_string(framing::get_u32(head + 12));
    return nullptr;
  }
  reader->offset_ = sizeof head;
  if (!reader->read_chunk() || !reader->chunk_.has_header()) {
    error = path + ": " +
            (reader->problem_.empty()
                 ? "byte " + std::to_string(reader->chunk_offset_) + ": the first chunk is not a trace header"
                 : reader->problem_);
    return nullptr;
  }
  reader->header_ = reader->chunk_.header();
  return reader;
}

TraceReader::TraceReader(std::FILE* file, std::string path) : file_(file), path_(std::move(path)) {}

TraceReader::~TraceReader() { std::fclose(file_); }

void TraceReader::fail(uint64_t offset, const std::string& what) {
  done_ = true;
  corrupt_ = true;
  problem_ = "byte " + std::to_string(offset) + ": " + what;
}

bool TraceReader::read_chunk() {
  chunk_offset_ = offset_;
  unsigned char head[framing::kChunkHeaderBytes];
  size_t got = std::fread(head, 1, sizeof head, file_);
  if (got == 0 && std::feof(file_)) return false;  // clean end of file
  if (got < sizeof head) {
    done_ = true;
    problem_ = "trace ends early at byte " + std::to_string(offset_ + got) + "; read up to there";
    return false;
  }
  uint32_t length = framing::get_u32(head);
  if (length > framing::kMaxChunkBytes) {
    fail(offset_,
         "chunk length " + std::to_string(length) + " exceeds the limit of " + std::to_string(framing::kMaxChunkBytes));
    return false;
  }
  const uint8_t codec = head[4];
  if ((codec != framing::kCodecNone && codec != framing::kCodecZstd) || head[5] || head[6] || head[7]) {
    fail(offset_ + 4, "unknown chunk codec " + std::to_string(codec));
    return false;
  }
  if (file_size_ && offset_ + sizeof head + length > file_size_) {
    done_ = true;
    problem_ = "trace ends early at byte " + std::to_string(file_size_) + "; read up to there";
    return false;
  }
  buffer_.resize(length);
  got = std::fread(buffer_.data(), 1, length, file_);
  if (got < length) {
    done_ = true;
    problem_ = "trace ends early at byte " + std::to_string(offset_ + sizeof head + got) + "; read up to there";
    return false;
  }
#ifndef MEMTRACE_FUZZ_NO_CHECKSUM  // the fuzz target skips it, to reach what lies behind it
  if (framing::crc32c(buffer_.data(), length) != framing::get_u32(head + 8)) {
    fail(offset_, "chunk checksum mismatch (the file is damaged)");
    return false;
  }
#endif
  if (codec == framing::kCodecZstd) {
    // The frame says how large it unpacks to: refuse anything over the chunk limit before
    // unpacking, so a damaged size cannot make us allocate without bound.
    unsigned long long size = ZSTD_getFrameContentSize(buffer_.data(), buffer_.size());
    if (size == ZSTD_CONTENTSIZE_UNKNOWN || size == ZSTD_CONTENTSIZE_ERROR || size > framing::kMaxChunkBytes) {
      fail(offset_ + sizeof head, "compressed chunk with a bad or too large size");
      return false;
    }
    unpacked_.resize(size);
    size_t n = ZSTD_decompress(unpacked_.data(), unpacked_.size(), buffer_.data(), buffer_.size());
    if (ZSTD_isError(n) || n != size) {
      fail(offset_ + sizeof head, std::string("compressed chunk does not unpack: ") +
                                      (ZSTD_isError(n) ? ZSTD_getErrorName(n) : "wrong size"));
      return false;
    }
    buffer_.swap(unpacked_);
  }
  // Most chunks are events: parsed into a batch kept from chunk to chunk, its columns keep their
  // capacity (a Chunk switching between kinds would free and regrow them every time).
  chunk_is_events_ = false;
  if (buffer_.size() > 1 && static_cast<unsigned char>(buffer_[0]) == kEventsTag) {
    const auto* p = reinterpret_cast<const unsigned char*>(buffer_.data()) + 1;
    const auto* end = reinterpret_cast<const unsigned char*>(buffer_.data()) + buffer_.size();
    uint64_t field_bytes = 0;
    int shift = 0;
    while (p < end && shift < 35) {
      field_bytes |= static_cast<uint64_t>(*p & 0x7F) << shift;
      shift += 7;
      if (!(*p++ & 0x80)) break;
    }
    if (field_bytes == static_cast<uint64_t>(end - p)) {
      if (!events_batch_.ParseFromArray(p, static_cast<int>(field_bytes))) {
        fail(offset_ + sizeof head, "chunk does not parse");
        return false;
      }
      chunk_is_events_ = true;
      offset_ += sizeof head + length;
      return true;
    }
  }
  if (!chunk_.ParseFromString(buffer_)) {
    fail(offset_ + sizeof head, "chunk does not parse");
    return false;
  }
  offset_ += sizeof head + length;
  return true;
}

bool TraceReader::take_chunk() {
  if (chunk_is_events_) return decode_events(events_batch_);
  switch (chunk_.body_case()) {
    case pb::Chunk::kStrings: {
      const auto& t = chunk_.strings();
      if (t.first_id() != strings_.size()) {
        fail(chunk_offset_, "string table starts at id " + std::to_string(t.first_id()) + ", expected " +
                                std::to_string(strings_.size()));
        return false;
      }
      for (const auto& s : t.values()) strings_.push_back(s);
      return true;
    }
    case pb::Chunk::kFrames:
      for (const auto& f : chunk_.frames().frames()) {
        if (f.id() != frames_.size()) {
          fail(chunk_offset_, "frame id " + std::to_string(f.id()) + " out of order");
          return false;
        }
        if (f.module() >= strings_.size() || f.function() >= strings_.size() || f.file() >= strings_.size()) {
          fail(chunk_offset_, "frame " + std::to_string(f.id()) + " names an unknown string");
          return false;
        }
        frames_.push_back(f);
      }
      return true;
    case pb::Chunk::kStacks:
      for (const auto& s : chunk_.stacks().stacks()) {
        if (s.id() != stacks_.size()) {
          fail(chunk_offset_, "stack id " + std::to_string(s.id()) + " out of order");
          return false;
        }
        for (uint64_t f : s.frame_ids()) {
          if (f == 0 || f >= frames_.size()) {
            fail(chunk_offset_, "stack " + std::to_string(s.id()) + " names unknown frame " + std::to_string(f));
            return false;
          }
        }
        stacks_.emplace_back(s.frame_ids().begin(), s.frame_ids().end());
        stack_flags_.push_back(s.flags());
      }
      return true;
    case pb::Chunk::kEvents: return decode_events(chunk_.events());
    case pb::Chunk::kSnapshot: {
      if (snapshot_) {
        fail(chunk_offset_, "a second snapshot chunk");
        return false;
      }
      snapshot_ = chunk_.snapshot();
      std::vector<Event> request;
      if (!decode_batch(snapshot_->request(), request) || request.size() > 1 ||
          !decode_batch(snapshot_->recent(), recent_events_))
        return false;
      if (!request.empty()) snapshot_request_ = request.front();
      return true;
    }
    case pb::Chunk::kDevices:
      for (const auto& d : chunk_.devices().devices()) *header_.add_devices() = d;
      return true;
    case pb::Chunk::kFooter:
      footer_ = chunk_.footer();
      done_ = true;
      return true;
    case pb::Chunk::kHeader: fail(chunk_offset_, "a second trace header"); return false;
    default: return true;  // annotations and chunk types of later versions: skipped
  }
}

bool TraceReader::decode_events(const pb::EventBatch& b) {
  next_event_ = 0;
  return decode_batch(b, events_);
}

bool TraceReader::decode_batch(const pb::EventBatch& b, std::vector<Event>& out) {
  const int n = static_cast<int>(b.count());
  auto column_ok = [n](int size) { return size == 0 || size == n; };
  if (!column_ok(b.time_delta_size()) || !column_ok(b.tid_size()) || !column_ok(b.api_size()) ||
      !column_ok(b.kind_size()) || !column_ok(b.layer_size()) || !column_ok(b.device_size()) ||
      !column_ok(b.stream_size()) || !column_ok(b.addr_delta_size()) || !column_ok(b.size_size()) ||
      !column_ok(b.aux_size()) || !column_ok(b.result_size()) || !column_ok(b.stack_id_size()) ||
      !column_ok(b.device_free_size()) || !column_ok(b.device_total_size())) {
    fail(chunk_offset_, "event batch columns disagree with its count of " + std::to_string(n));
    return false;
  }
  // Column by column: each loop is one field over the whole batch.
  out.assign(static_cast<size_t>(n), Event());
  Event* e = out.data();
  if (b.time_delta_size()) {
    uint64_t t = 0;
    for (int i = 0; i < n; ++i) e[i].t_ns = t += static_cast<uint64_t>(b.time_delta(i));
  }
  if (b.tid_size())
    for (int i = 0; i < n; ++i) e[i].tid = b.tid(i);
  if (b.api_size())
    for (int i = 0; i < n; ++i)
      e[i].api = b.api(i) < static_cast<uint32_t>(Api::kCount) ? static_cast<Api>(b.api(i)) : Api::kUnknown;
  if (b.kind_size())
    for (int i = 0; i < n; ++i)
      e[i].kind = b.kind(i) < static_cast<uint32_t>(MemKind::kCount) ? static_cast<MemKind>(b.kind(i)) : MemKind::kUnknown;
  if (b.layer_size())
    for (int i = 0; i < n; ++i) e[i].layer = b.layer(i) <= 3 ? static_cast<Layer>(b.layer(i)) : Layer::kUnknown;
  if (b.device_size())
    for (int i = 0; i < n; ++i) e[i].device = b.device(i);
  if (b.stream_size())
    for (int i = 0; i < n; ++i) e[i].stream = b.stream(i);
  if (b.addr_delta_size()) {
    uint64_t addr = 0;
    for (int i = 0; i < n; ++i) e[i].addr = addr += static_cast<uint64_t>(b.addr_delta(i));
  }
  if (b.size_size())
    for (int i = 0; i < n; ++i) e[i].size = b.size(i);
  if (b.aux_size())
    for (int i = 0; i < n; ++i) e[i].aux = b.aux(i);
  if (b.result_size())
    for (int i = 0; i < n; ++i) e[i].result = b.result(i);
  if (b.stack_id_size()) {
    const uint64_t stacks = stacks_.size();
    for (int i = 0; i < n; ++i) {
      e[i].stack_id = b.stack_id(i);
      if (e[i].stack_id >= stacks) {
        fail(chunk_offset_, "event " + std::to_string(i) + " names unknown stack " + std::to_string(e[i].stack_id));
        return false;
      }
    }
  }
  if (b.device_free_size())
    for (int i = 0; i < n; ++i) e[i].device_free = b.device_free(i);
  if (b.device_total_size())
    for (int i = 0; i < n; ++i) e[i].device_total = b.device_total(i);
  return true;
}

bool TraceReader::next(Event& event) {
  while (next_event_ >= events_.size()) {
    events_.clear();
    next_event_ = 0;
    if (done_) return false;
    if (!read_chunk()) {
      if (!done_) {  // clean end of file without a footer
        done_ = true;
        problem_ = "trace ends early at byte " + std::to_string(offset_) + "; read up to there";
      }
      return false;
    }
    if (!take_chunk()) return false;
  }
  event = events_[next_event_++];
  return true;
}

std::string_view TraceReader::string(uint64_t id) const {
  return id < strings_.size() ? std::string_view(strings_[id]) : std::string_view();
}

const pb::Frame* TraceReader::frame(uint64_t id) const {
  return id > 0 && id < frames_.size() ? &frames_[id] : nullptr;
}

const std::vector<uint64_t>* TraceReader::stack(uint64_t id) const {
  return id < stacks_.size() ? &stacks_[id] : nullptr;
}

uint32_t TraceReader::stack_flags(uint64_t id) const { return id < stack_flags_.size() ? stack_flags_[id] : 0; }

}  // namespace memtrace
