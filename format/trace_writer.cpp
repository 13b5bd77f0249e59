#include "memtrace/format/trace_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include "event_batch_wire.h"
#include "memtrace/format/framing.h"
#include "memtrace/format/utf8.h"

namespace memtrace {

std::unique_ptr<TraceWriter> TraceWriter::create(const std::string& path, std::string& error, int compression,
                                                 unsigned mode) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    error = "cannot create " + path + ": " + std::strerror(errno);
    return nullptr;
  }
  if (mode != 0600) ::fchmod(fd, mode);  // created private, opened up only as asked
  return create_on(fd, path, error, compression);
}

std::unique_ptr<TraceWriter> TraceWriter::create_on(int fd, const std::string& name, std::string& error,
                                                    int compression) {
  std::unique_ptr<TraceWriter> writer(new TraceWriter(fd, name, compression));
  return start(std::move(writer), error);
}

std::unique_ptr<TraceWriter> TraceWriter::create_on(std::shared_ptr<ChunkChannel> channel, const std::string& name,
                                                    std::string& error) {
  std::unique_ptr<TraceWriter> writer(new TraceWriter(-1, name, 0));
  writer->channel_ = std::move(channel);
  return start(std::move(writer), error);
}

std::unique_ptr<TraceWriter> TraceWriter::start(std::unique_ptr<TraceWriter> writer, std::string& error) {
  unsigned char head[framing::kFileHeaderBytes] = {};
  std::memcpy(head, framing::kMagic, sizeof framing::kMagic);
  framing::put_u32(head + 8, framing::kFormatVersion);
  writer->write_bytes(head, sizeof head);
  if (writer->failed()) {
    error = writer->error();
    return nullptr;
  }
  return writer;
}

TraceWriter::TraceWriter(int fd, std::string path, int compression)
    : fd_(fd), path_(std::move(path)), compression_(compression) {
  pending_events_.reserve(kEventsPerBatch);
  if (compression_ > 0) zstd_ = ZSTD_createCCtx();
}

TraceWriter::~TraceWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (channel_) channel_->close_writing();  // unfinished: the reader finds the trace cut
  ZSTD_freeCCtx(static_cast<ZSTD_CCtx*>(zstd_));
}

void TraceWriter::write_bytes(const void* data, size_t size) {
  if (channel_) {
    if (failed()) return;
    if (!channel_->put_bytes(data, size)) error_ = "cannot write " + path_ + ": its reader went";
    bytes_written_ += size;
    return;
  }
  auto p = static_cast<const char*>(data);
  while (size > 0 && !failed()) {
    ssize_t n = ::write(fd_, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error_ = "cannot write " + path_ + ": " + std::strerror(n < 0 ? errno : ENOSPC);
      return;
    }
    p += n;
    size -= static_cast<size_t>(n);
    bytes_written_ += static_cast<uint64_t>(n);
  }
}

namespace {

// Frames the serialized chunk at DATA (SIZE bytes), compressing it with CTX (or a context of its
// own when null) at LEVEL > 0.
std::string frame_payload(const char* data, size_t size, int level, ZSTD_CCtx* ctx, std::string& compressed) {
  const char* payload = data;
  size_t payload_size = size;
  uint8_t codec = framing::kCodecNone;
  if (level > 0) {
    compressed.resize(ZSTD_compressBound(size));
    size_t n = ctx ? ZSTD_compressCCtx(ctx, compressed.data(), compressed.size(), data, size, level)
                   : ZSTD_compress(compressed.data(), compressed.size(), data, size, level);
    if (!ZSTD_isError(n) && n < size) {  // small chunks may not shrink: keep them as they are
      payload = compressed.data();
      payload_size = n;
      codec = framing::kCodecZstd;
    }
  }
  std::string out(framing::kChunkHeaderBytes + payload_size, '\0');
  auto* head = reinterpret_cast<unsigned char*>(out.data());
  framing::put_u32(head, static_cast<uint32_t>(payload_size));
  head[4] = codec;
  framing::put_u32(head + 8, framing::crc32c(payload, payload_size));
  std::memcpy(out.data() + framing::kChunkHeaderBytes, payload, payload_size);
  return out;
}

// The freed column of EVENTS into FREED (freed_references.h), with REFERENCES; null: none.
const uint64_t* freed_values(const std::vector<Event>& events, FreedReferenceWriter* references,
                             std::vector<uint64_t>& freed) {
  if (!references) return nullptr;
  freed.resize(events.size());
  for (size_t i = 0; i < events.size(); ++i) freed[i] = references->value(events[i]);
  return freed.data();
}

}  // namespace

namespace {
// Writes all of DATA to FD, whatever the kernel takes at a time.
bool write_all(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = ENOSPC;
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}
}  // namespace

bool TraceWriter::replace_chunk(const std::string& path, uint64_t offset, uint64_t size, const pb::Chunk& chunk,
                                int compression, unsigned file_mode, std::string& error) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.eof() && in.fail()) {
    error = "cannot read " + path;
    return false;
  }
  if (offset + size > bytes.size() || size < framing::kChunkHeaderBytes) {
    error = "cannot update " + path + ": it has no chunk at byte " + std::to_string(offset);
    return false;
  }
  std::string updated = bytes.substr(0, offset) + framed(chunk, compression) + bytes.substr(offset + size);
  std::string temp = path + ".tmp";
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  bool ok = fd >= 0 && ::fchmod(fd, file_mode) == 0 && write_all(fd, updated);
  int saved = errno;
  if (fd >= 0 && ::close(fd) != 0 && ok) {
    ok = false;
    saved = errno;
  }
  if (ok && ::rename(temp.c_str(), path.c_str()) == 0) return true;
  if (ok) saved = errno;
  if (fd >= 0) ::unlink(temp.c_str());
  error = "cannot update " + path + ": " + std::strerror(saved);
  return false;
}

std::string TraceWriter::framed(const pb::Chunk& chunk, int compression) {
  std::string serialized = chunk.SerializeAsString(), compressed;
  return frame_payload(serialized.data(), serialized.size(), compression, nullptr, compressed);
}

void TraceWriter::write_chunk(const pb::Chunk& chunk) {
  if (failed() || (fd_ < 0 && !channel_)) return;
  scratch_.clear();
  chunk.SerializeToString(&scratch_);
  write_serialized(scratch_.data(), scratch_.size());
}

void TraceWriter::write_serialized(const char* chunk, size_t size) {
  if (failed() || (fd_ < 0 && !channel_)) return;
  if (size > framing::kMaxChunkBytes) {
    error_ = "internal error: chunk of " + std::to_string(size) + " bytes is too large";
    return;
  }
  std::string bytes = frame_payload(chunk, size, compression_, static_cast<ZSTD_CCtx*>(zstd_), compressed_);
  write_bytes(bytes.data(), bytes.size());
}

namespace {
void make_valid(std::string* text) {
  if (!is_valid_utf8(*text)) *text = valid_utf8(*text);
}
void make_valid(pb::Device& device) {
  make_valid(device.mutable_name());
  make_valid(device.mutable_uuid());
}
}  // namespace

void TraceWriter::write_header(const pb::TraceHeader& header) {
  pb::Chunk chunk;
  *chunk.mutable_header() = header;
  pb::TraceHeader& h = *chunk.mutable_header();
  for (std::string& arg : *h.mutable_command()) make_valid(&arg);
  make_valid(h.mutable_host());
  make_valid(h.mutable_memtrace_version());
  make_valid(h.mutable_imported_from());
  for (pb::Device& device : *h.mutable_devices()) make_valid(device);
  chunk.mutable_header()->set_format_version(framing::kFormatVersion);
  write_chunk(chunk);
}

void TraceWriter::add_device(const pb::Device& device) {
  pb::Device* added = pending_devices_.add_devices();
  *added = device;
  make_valid(*added);
}

uint64_t TraceWriter::intern_string(std::string_view value) {
  auto [it, inserted] = strings_.try_emplace(std::string(value), strings_.size() + 1);
  if (inserted) {
    if (pending_strings_.values_size() == 0) pending_strings_.set_first_id(it->second);
    pending_strings_.add_values(valid_utf8(value));
    string_values_.emplace_back(value);
  }
  return it->second;
}

uint64_t TraceWriter::intern_frame(const FrameInfo& f) {
  std::string key;
  key.reserve(40 + f.module.size() + f.function.size() + f.file.size());
  for (uint64_t v : {uint64_t(f.python), f.address, f.offset, uint64_t(f.line), uint64_t(f.inlined)})
    key.append(reinterpret_cast<const char*>(&v), sizeof v);
  for (std::string_view part : {f.module, f.function, f.file}) key.append(part).push_back('\0');
  auto [it, inserted] = frames_.try_emplace(std::move(key), frames_.size() + 1);
  if (inserted) {
    pb::Frame* frame = pending_frames_.add_frames();
    frame->set_id(it->second);
    frame->set_address(f.address);
    if (!f.module.empty()) frame->set_module(intern_string(f.module));
    frame->set_offset(f.offset);
    if (!f.function.empty()) frame->set_function(intern_string(f.function));
    if (!f.file.empty()) frame->set_file(intern_string(f.file));
    frame->set_line(f.line);
    frame->set_frame_kind(f.python ? 1 : 0);
    frame->set_inlined(f.inlined);
    frame_values_.push_back(*frame);
  }
  return it->second;
}

uint64_t TraceWriter::intern_stack(const std::vector<uint64_t>& all_frame_ids, uint32_t flags) {
  // Never more frames than a reader takes: the innermost kept, the stack marked cut.
  std::vector<uint64_t> cut;
  if (all_frame_ids.size() > framing::kMaxStackFrames) {
    cut.assign(all_frame_ids.begin(), all_frame_ids.begin() + framing::kMaxStackFrames);
    flags |= pb::STACK_TRUNCATED;
  }
  const std::vector<uint64_t>& frame_ids = cut.empty() ? all_frame_ids : cut;
  std::string key(reinterpret_cast<const char*>(frame_ids.data()), frame_ids.size() * sizeof(uint64_t));
  key.append(reinterpret_cast<const char*>(&flags), sizeof flags);
  auto [it, inserted] = stacks_.try_emplace(std::move(key), stacks_.size() + 1);
  if (inserted) {
    pb::Stack* stack = pending_stacks_.add_stacks();
    stack->set_id(it->second);
    for (uint64_t id : frame_ids) stack->add_frame_ids(id);
    stack->set_flags(flags);
    stack_values_.emplace_back(frame_ids, flags);
  }
  return it->second;
}

void TraceWriter::add(const Event& event) {
  pending_events_.push_back(event);
  if (pending_events_.size() >= (channel_ ? kChannelEventsPerBatch : kEventsPerBatch)) flush();
}

// Tables go out before the events that name their entries, so every id a reader meets is known.
void TraceWriter::flush_tables() {
  pb::Chunk chunk;
  if (pending_strings_.values_size() > 0) {
    chunk.mutable_strings()->Swap(&pending_strings_);
    write_chunk(chunk);
    pending_strings_.Clear();
  }
  if (pending_frames_.frames_size() > 0) {
    chunk.mutable_frames()->Swap(&pending_frames_);
    write_chunk(chunk);
    pending_frames_.Clear();
  }
  if (pending_stacks_.stacks_size() > 0) {
    chunk.mutable_stacks()->Swap(&pending_stacks_);
    write_chunk(chunk);
    pending_stacks_.Clear();
  }
  if (pending_devices_.devices_size() > 0) {
    chunk.mutable_devices()->Swap(&pending_devices_);
    write_chunk(chunk);
    pending_devices_.Clear();
  }
}

void TraceWriter::encode_events(const std::vector<Event>& events, pb::EventBatch& batch,
                                FreedReferenceWriter* references) {
  std::vector<uint64_t> freed;
  std::string bytes(event_batch_bound(events.size()), '\0');
  bytes.resize(encode_event_batch(events.data(), events.size(), freed_values(events, references, freed),
                                  reinterpret_cast<unsigned char*>(bytes.data())));
  batch.ParseFromString(bytes);
}

void TraceWriter::flush_events() {
  if (pending_events_.empty()) return;
  if (channel_) {
    if (failed()) return;
    // As a reader of the file finds them: of the fields that share a column, the API's own.
    for (Event& e : pending_events_) {
      uint64_t aux = aux_value(e);
      e.handle = e.heap = e.name = 0;
      set_aux_value(e, aux);
    }
    events_written_ += pending_events_.size();
    if (!channel_->put_events(pending_events_)) error_ = "cannot write " + path_ + ": its reader went";
    pending_events_.clear();
    return;
  }
  // Grown, never shrunk: a buffer cleared for every batch cost more than encoding it.
  const size_t bound = kEventsChunkRoom + event_batch_bound(pending_events_.size());
  if (batch_buffer_.size() < bound) batch_buffer_.resize(bound);
  unsigned char* const batch = batch_buffer_.data() + kEventsChunkRoom;
  // A snapshot's events (after write_snapshot) are not marked: nothing frees them.
  const size_t batch_bytes =
      encode_event_batch(pending_events_.data(), pending_events_.size(),
                         freed_values(pending_events_, snapshot_size_ ? nullptr : &references_, freed_), batch);
  const unsigned char* const chunk = wrap_as_events_chunk(batch, batch_bytes);
  write_serialized(reinterpret_cast<const char*>(chunk), static_cast<size_t>(batch + batch_bytes - chunk));
  events_written_ += pending_events_.size();
  pending_events_.clear();
}

void TraceWriter::write_snapshot(const pb::Snapshot& snapshot) {
  flush();  // the tables its events name go first
  pb::Chunk chunk;
  *chunk.mutable_snapshot() = snapshot;
  snapshot_offset_ = bytes_written_;
  write_chunk(chunk);
  snapshot_size_ = bytes_written_ - snapshot_offset_;
}

std::vector<FrameInfo> TraceWriter::stack_frames(uint64_t stack_id) const {
  std::vector<FrameInfo> frames;
  if (stack_id == 0 || stack_id >= stack_values_.size()) return frames;
  for (uint64_t id : stack_values_[stack_id].first) {
    const pb::Frame& f = frame_values_[id];
    FrameInfo& info = frames.emplace_back();
    info.python = f.frame_kind() == 1;
    info.address = f.address();
    info.module = string_values_[f.module()];
    info.offset = f.offset();
    info.function = string_values_[f.function()];
    info.file = string_values_[f.file()];
    info.line = f.line();
    info.inlined = f.inlined();
  }
  return frames;
}

uint64_t TraceWriter::import_stack(const TraceWriter& source, uint64_t stack_id) {
  if (stack_id == 0 || stack_id >= source.stack_values_.size()) return 0;
  auto [it, fresh] = imported_[&source].try_emplace(stack_id, 0);
  if (!fresh) return it->second;
  std::vector<uint64_t> mine;
  for (const FrameInfo& info : source.stack_frames(stack_id)) mine.push_back(intern_frame(info));
  it->second = intern_stack(mine, source.stack_values_[stack_id].second);
  return it->second;
}

void TraceWriter::flush() {
  flush_tables();
  flush_events();
}

void TraceWriter::finish(pb::Footer footer) {
  flush();
  make_valid(footer.mutable_end_reason());
  for (std::string& notice : *footer.mutable_notices()) make_valid(&notice);
  footer.set_events(events_written_);
  pb::Chunk chunk;
  *chunk.mutable_footer() = std::move(footer);
  write_chunk(chunk);
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  if (channel_) {
    channel_->close_writing();
    channel_.reset();
  }
}

}  // namespace memtrace
