// Writes one process's trace: header, interned strings/frames/stacks, event batches, footer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "memtrace.pb.h"
#include "memtrace/format/chunk_channel.h"
#include "memtrace/format/event.h"
#include "memtrace/format/framing.h"
#include "memtrace/format/freed_references.h"

namespace memtrace {

// One frame of a stack, as the writer interns it.
struct FrameInfo {
  bool python = false;
  uint64_t address = 0;  // native: the return address
  std::string_view module;
  uint64_t offset = 0;  // native: the ELF virtual address in the module
  std::string_view function;
  std::string_view file;
  uint32_t line = 0;
  bool inlined = false;
};

class TraceWriter {
 public:
  // Creates PATH with mode 0600, never over an existing file nor through a symbolic link.
  // COMPRESSION is the zstd level of each chunk (0: none); MODE the file's permissions, exactly
  // (whatever the process's umask). Returns null and sets ERROR when it cannot.
  static std::unique_ptr<TraceWriter> create(const std::string& path, std::string& error, int compression = 1,
                                             unsigned mode = 0600);
  // The same on FD, open for writing (a memfd, say), which the writer then owns; NAME is for
  // messages.
  static std::unique_ptr<TraceWriter> create_on(int fd, const std::string& name, std::string& error,
                                                int compression = 1);
  // The same into CHANNEL, for a reader in this process: not compressed, and its events handed
  // over as they are (each as a reader of the file would decode it).
  static std::unique_ptr<TraceWriter> create_on(std::shared_ptr<ChunkChannel> channel, const std::string& name,
                                                std::string& error);
  ~TraceWriter();
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  void write_header(const pb::TraceHeader& header);
  // Written with the next chunk of events.
  void add_device(const pb::Device& device);
  uint64_t intern_string(std::string_view value);
  uint64_t intern_frame(const FrameInfo& frame);
  uint64_t intern_stack(const std::vector<uint64_t>& frame_ids, uint32_t flags = 0);
  void add(const Event& event);
  // Writes what is buffered as whole chunks, so a reader sees it even if we die next.
  void flush();
  // Flushes and writes the footer (its `events` is filled in here), then closes the file.
  void finish(pb::Footer footer);

  // Snapshots. A snapshot chunk goes after the tables its events name; where it went is kept,
  // so that it can be replaced later (replace_chunk). The events after it, the allocations live
  // then, are not marked for frees by reference: nothing after them frees anything.
  void write_snapshot(const pb::Snapshot& snapshot);
  uint64_t snapshot_offset() const { return snapshot_offset_; }
  uint64_t snapshot_size() const { return snapshot_size_; }
  // The stack STACK_ID of SOURCE, interned here (with its frames and strings).
  uint64_t import_stack(const TraceWriter& source, uint64_t stack_id);
  // The frames of stack STACK_ID as interned, innermost first (views of this writer's tables).
  std::vector<FrameInfo> stack_frames(uint64_t stack_id) const;
  // Events in columns, as they are stored: at most framing::kMaxBatchEvents of them. With
  // REFERENCES, the trace's, frees name what they free (freed_references.h); a snapshot's own
  // batches are read alone, without.
  static void encode_events(const std::vector<Event>& events, pb::EventBatch& batch,
                            FreedReferenceWriter* references = nullptr);
  // Replaces the chunk stored at OFFSET (SIZE bytes, frame included) of the trace at PATH with
  // CHUNK, compressed at level COMPRESSION: a copy is written beside it (permissions FILE_MODE)
  // and renamed over it, so the file is whole at every moment. False with ERROR set otherwise.
  static bool replace_chunk(const std::string& path, uint64_t offset, uint64_t size, const pb::Chunk& chunk,
                            int compression, unsigned file_mode, std::string& error);

  uint64_t events_written() const { return events_written_; }
  bool failed() const { return !error_.empty(); }
  const std::string& error() const { return error_; }
  const std::string& path() const { return path_; }

  static constexpr size_t kEventsPerBatch = 16384;
  static_assert(kEventsPerBatch <= framing::kMaxBatchEvents);
  // Into a channel, nothing is compressed: smaller batches let its reader start sooner and hold
  // less (a PyTorch snapshot's import and its analysis run side by side).
  static constexpr size_t kChannelEventsPerBatch = 4096;

 private:
  TraceWriter(int fd, std::string path, int compression);
  // Writes the file header; null with ERROR set when it cannot.
  static std::unique_ptr<TraceWriter> start(std::unique_ptr<TraceWriter> writer, std::string& error);
  // A chunk framed as it is stored in a file, compressed at level COMPRESSION (0: not).
  static std::string framed(const pb::Chunk& chunk, int compression);
  void write_chunk(const pb::Chunk& chunk);
  // Frames and writes the serialized Chunk at CHUNK (SIZE bytes).
  void write_serialized(const char* chunk, size_t size);
  void write_bytes(const void* data, size_t size);
  void flush_tables();
  void flush_events();

  int fd_;
  std::shared_ptr<ChunkChannel> channel_;  // in place of FD_ (create_on a channel)
  std::string path_;
  std::string error_;
  std::unordered_map<std::string, uint64_t> strings_;
  std::unordered_map<std::string, uint64_t> frames_;  // everything about the frame -> frame id
  std::unordered_map<std::string, uint64_t> stacks_;  // frame ids and flags as bytes -> stack id
  pb::StringTable pending_strings_;
  pb::FrameTable pending_frames_;
  pb::StackTable pending_stacks_;
  pb::DeviceTable pending_devices_;
  std::vector<Event> pending_events_;
  FreedReferenceWriter references_;
  std::vector<uint64_t> freed_;              // a batch's freed column, reused
  std::vector<unsigned char> batch_buffer_;  // a batch's chunk as it is encoded, reused
  uint64_t events_written_ = 0;
  uint64_t bytes_written_ = 0;
  uint64_t snapshot_offset_ = 0, snapshot_size_ = 0;
  // What the ids stand for, to copy stacks into another trace (snapshots).
  std::vector<std::string> string_values_{""};
  std::vector<pb::Frame> frame_values_{pb::Frame()};
  std::vector<std::pair<std::vector<uint64_t>, uint32_t>> stack_values_{{}};
  std::unordered_map<const TraceWriter*, std::unordered_map<uint64_t, uint64_t>> imported_;
  std::string scratch_;
  std::string compressed_;
  int compression_;
  void* zstd_ = nullptr;  // ZSTD_CCtx, reused for every chunk
};

}  // namespace memtrace
