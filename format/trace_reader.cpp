#include "memtrace/format/trace_reader.h"

#include <cerrno>
#include <cstring>
#include <utility>

#include "chunk_source.h"
#include "memtrace/format/chunk_channel.h"
#include "memtrace/format/framing.h"

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
  uint64_t file_size = 0;  // unknown
  if (std::fseek(file, 0, SEEK_END) == 0) {
    long end = std::ftell(file);
    if (end >= 0) file_size = static_cast<uint64_t>(end);
    std::rewind(file);
  }
  reader->source_ = std::make_unique<ChunkSource>(file, 0, file_size);
  return start(std::move(reader), error);
}

std::unique_ptr<TraceReader> TraceReader::open(std::shared_ptr<ChunkChannel> channel, const std::string& name,
                                               std::string& error) {
  std::unique_ptr<TraceReader> reader(new TraceReader(nullptr, name));
  reader->channel_ = channel;
  reader->source_ = std::make_unique<ChunkSource>(std::move(channel));
  return start(std::move(reader), error);
}

std::unique_ptr<TraceReader> TraceReader::start(std::unique_ptr<TraceReader> reader, std::string& error) {
  const std::string& path = reader->path_;
  unsigned char head[framing::kFileHeaderBytes];
  size_t got = reader->source_->read_bytes(head, sizeof head);
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
  if (!reader->read_chunk() || !reader->chunk_->chunk.has_header()) {
    error = path + ": " +
            (reader->problem_.empty()
                 ? "byte " + std::to_string(reader->chunk_offset_) + ": the first chunk is not a trace header"
                 : reader->problem_);
    return nullptr;
  }
  reader->header_ = reader->chunk_->chunk.header();
  if (reader->header_.devices_size() > int(framing::kMaxDevices)) {
    error = path + ": the trace header names more than the " + std::to_string(framing::kMaxDevices) +
            " devices a trace may name";
    return nullptr;
  }
  return reader;
}

TraceReader::TraceReader(std::FILE* file, std::string path) : file_(file), path_(std::move(path)) {}

TraceReader::~TraceReader() {
  if (channel_) channel_->close_reading();  // a writer waiting for room goes on, and stops
  source_.reset();                          // its thread reads file_
  if (file_) std::fclose(file_);
  writer_finished();
}

void TraceReader::writer_finished() {
  if (!writer_finish_) return;
  std::string problem = std::exchange(writer_finish_, nullptr)();
  if (!problem.empty() && !footer_) {
    corrupt_ = true;
    problem_ = problem;
  }
}

void TraceReader::fail(uint64_t offset, const std::string& what) {
  done_ = true;
  corrupt_ = true;
  problem_ = "byte " + std::to_string(offset) + ": " + what;
}

bool TraceReader::read_chunk() {
  RawChunk& raw = source_->next();
  chunk_ = &raw;
  chunk_offset_ = raw.offset;
  offset_ = raw.end_offset;
  switch (raw.status) {
    case RawChunk::Status::kOk: return true;
    case RawChunk::Status::kEnd: return false;
    case RawChunk::Status::kCut:
      done_ = true;
      problem_ = raw.problem;
      return false;
    case RawChunk::Status::kCorrupt: fail(raw.problem_offset, raw.problem); return false;
  }
  return false;
}

void TraceReader::prefetch() {
  if (!channel_) source_->prefetch();  // a channel's writer runs ahead on a thread of its own
}

bool TraceReader::take_chunk() {
  if (chunk_->is_events) {  // decoded by the source: take its events, give it back our vector
    events_.swap(chunk_->events);
    next_event_ = 0;
    return true;
  }
  const pb::Chunk& chunk = chunk_->chunk;
  switch (chunk.body_case()) {
    case pb::Chunk::kStrings: {
      const auto& t = chunk.strings();
      if (t.first_id() != strings_.size()) {
        fail(chunk_offset_, "string table starts at id " + std::to_string(t.first_id()) + ", expected " +
                                std::to_string(strings_.size()));
        return false;
      }
      for (const auto& s : t.values()) {
        if (!hold(sizeof(std::string) + s.size(), "strings")) return false;
        strings_.push_back(s);
      }
      return true;
    }
    case pb::Chunk::kFrames:
      for (const auto& f : chunk.frames().frames()) {
        if (f.id() != frames_.size()) {
          fail(chunk_offset_, "frame id " + std::to_string(f.id()) + " out of order");
          return false;
        }
        if (f.module() >= strings_.size() || f.function() >= strings_.size() || f.file() >= strings_.size()) {
          fail(chunk_offset_, "frame " + std::to_string(f.id()) + " names an unknown string");
          return false;
        }
        if (!hold(sizeof(pb::Frame) + f.ByteSizeLong(), "frames")) return false;
        frames_.push_back(f);
      }
      return true;
    case pb::Chunk::kStacks:
      for (const auto& s : chunk.stacks().stacks()) {
        if (s.id() != stacks_.size()) {
          fail(chunk_offset_, "stack id " + std::to_string(s.id()) + " out of order");
          return false;
        }
        if (s.frame_ids_size() > int(framing::kMaxStackFrames)) {
          fail(chunk_offset_, "stack " + std::to_string(s.id()) + " has " + std::to_string(s.frame_ids_size()) +
                                  " frames, more than the " + std::to_string(framing::kMaxStackFrames) +
                                  " a trace may hold in one stack");
          return false;
        }
        if (!hold(sizeof(std::vector<uint64_t>) + sizeof(uint32_t) + 8 * size_t(s.frame_ids_size()), "stacks"))
          return false;
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
    case pb::Chunk::kSnapshot: {
      if (snapshot_) {
        fail(chunk_offset_, "a second snapshot chunk");
        return false;
      }
      snapshot_ = chunk.snapshot();
      std::vector<Event> request;
      if (!decode_batch(snapshot_->request(), request) || request.size() > 1 ||
          !decode_batch(snapshot_->recent(), recent_events_))
        return false;
      if (!request.empty()) snapshot_request_ = request.front();
      return true;
    }
    case pb::Chunk::kDevices:
      if (header_.devices_size() + chunk.devices().devices_size() > int(framing::kMaxDevices)) {
        fail(chunk_offset_, "more than the " + std::to_string(framing::kMaxDevices) + " devices a trace may name");
        return false;
      }
      for (const auto& d : chunk.devices().devices()) *header_.add_devices() = d;
      return true;
    case pb::Chunk::kFooter:
      footer_ = chunk.footer();
      done_ = true;
      return true;
    case pb::Chunk::kHeader: fail(chunk_offset_, "a second trace header"); return false;
    default: return true;  // annotations and chunk types of later versions: skipped
  }
}

bool TraceReader::hold(uint64_t bytes, const char* table) {
  table_bytes_ += bytes;
  if (table_bytes_ <= framing::kMaxTableBytes) return true;
  fail(chunk_offset_, std::string("the ") + table + " take the tables past the " +
                          std::to_string(framing::kMaxTableBytes >> 20) + " MiB a trace may make a reader hold");
  return false;
}

bool TraceReader::decode_batch(const pb::EventBatch& b, std::vector<Event>& out) {
  std::string problem = decode_event_batch(b, stacks_.size(), out, nullptr);
  if (problem.empty()) return true;
  fail(chunk_offset_, problem);
  return false;
}

const Event* TraceReader::next_batch() {
  // A used-up batch keeps its size: handed back to the source, it is decoded over in place.
  while (next_event_ >= events_.size()) {
    if (done_) {
      writer_finished();
      return nullptr;
    }
    if (!read_chunk()) {
      if (!done_) {  // clean end of file without a footer
        done_ = true;
        problem_ = "trace ends early at byte " + std::to_string(offset_) + "; read up to there";
      }
      writer_finished();
      return nullptr;
    }
    if (!take_chunk()) {
      writer_finished();
      return nullptr;
    }
  }
  return &events_[next_event_++];
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
