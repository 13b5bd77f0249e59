// Reads a trace one chunk at a time. It trusts nothing in the file: every length, id and count is
// checked, and a problem ends the reading with a message naming the byte offset.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "memtrace.pb.h"
#include "memtrace/format/event.h"

namespace memtrace {

class ChunkChannel;
class ChunkSource;
struct RawChunk;

class TraceReader {
 public:
  // Opens PATH and reads its header chunk. Returns null and sets ERROR (one sentence) when PATH is
  // not a readable trace.
  static std::unique_ptr<TraceReader> open(const std::string& path, std::string& error);
  // The same over an open FILE, which the reader then owns; NAME is for messages.
  static std::unique_ptr<TraceReader> open(std::FILE* file, const std::string& name, std::string& error);
  // The same for the trace a writer in this process puts into CHANNEL (TraceWriter::create_on).
  static std::unique_ptr<TraceReader> open(std::shared_ptr<ChunkChannel> channel, const std::string& name,
                                           std::string& error);
  ~TraceReader();

  // The header, with the devices the trace described so far (they follow the header).
  const pb::TraceHeader& header() const { return header_; }
  const std::string& path() const { return path_; }

  // The next event in time order; null at the end of the trace or at the first problem. It stays
  // valid until the next call (it lies in the batch being read: no copy on the replay's path).
  const Event* next() { return next_event_ < events_.size() ? &events_[next_event_++] : next_batch(); }
  // The same, copied into EVENT; false at the end.
  bool next(Event& event) {
    const Event* e = next();
    if (e) event = *e;
    return e != nullptr;
  }
  // Reads (checks, unpacks, parses) the next chunks ahead on a thread of its own while the
  // caller decodes and uses the events: for a long pass over the whole trace.
  void prefetch();
  // For a trace read while it is written (a pipe): FINISH waits for its writer to end and says
  // what went wrong there (empty: nothing). Called once the trace ends, or as the reader goes
  // (after the file is closed, so that a writer held up by a full pipe is let go); where the trace
  // ends early, the writer's problem is the reader's, since it is why.
  void read_while_written(std::function<std::string()> finish) { writer_finish_ = std::move(finish); }

  // After next() returned false: whether the trace ended with its footer, and what was wrong if
  // not. A cut trace is not corrupt: it says where it ends early, and what came before is good.
  const std::optional<pb::Footer>& footer() const { return footer_; }
  bool corrupt() const { return corrupt_; }
  const std::string& problem() const { return problem_; }

  // A snapshot file's Snapshot chunk, its failed request, and the events that came before it.
  // Known once the first event was read (the chunk precedes the events).
  const std::optional<pb::Snapshot>& snapshot() const { return snapshot_; }
  const std::optional<Event>& snapshot_request() const { return snapshot_request_; }
  const std::vector<Event>& recent_events() const { return recent_events_; }

  std::string_view string(uint64_t id) const;
  const pb::Frame* frame(uint64_t id) const;
  const std::vector<uint64_t>* stack(uint64_t id) const;
  uint32_t stack_flags(uint64_t id) const;

 private:
  TraceReader(std::FILE* file, std::string path);
  // Reads the file header and the header chunk from source_; null with ERROR set when they are not.
  static std::unique_ptr<TraceReader> start(std::unique_ptr<TraceReader> reader, std::string& error);
  // Reads one chunk into chunk_; false at end of file or on a problem (problem_ set).
  bool read_chunk();
  // The first event of the next batch that has one; null at the end.
  const Event* next_batch();
  bool take_chunk();  // applies chunk_ (tables, events, footer); false on a problem
  bool decode_batch(const pb::EventBatch& batch, std::vector<Event>& out);
  // Counts BYTES more held in TABLE's entries; false (having failed) past framing::kMaxTableBytes.
  bool hold(uint64_t bytes, const char* table);
  void fail(uint64_t offset, const std::string& what);
  void writer_finished();

  std::FILE* file_;
  std::shared_ptr<ChunkChannel> channel_;  // in place of FILE_
  std::string path_;
  std::function<std::string()> writer_finish_;
  uint64_t offset_ = 0;        // bytes consumed so far
  uint64_t chunk_offset_ = 0;  // where the current chunk starts
  pb::TraceHeader header_;
  std::unique_ptr<ChunkSource> source_;
  RawChunk* chunk_ = nullptr;             // the chunk read last, the source's
  std::vector<std::string> strings_{""};  // id 0 is the empty string
  std::vector<pb::Frame> frames_{pb::Frame()};
  std::vector<std::vector<uint64_t>> stacks_{{}};
  std::vector<uint32_t> stack_flags_{0};
  std::vector<Event> events_;
  size_t next_event_ = 0;
  std::optional<pb::Footer> footer_;
  std::optional<pb::Snapshot> snapshot_;
  std::optional<Event> snapshot_request_;
  std::vector<Event> recent_events_;
  bool done_ = false;
  bool corrupt_ = false;
  std::string problem_;
  uint64_t table_bytes_ = 0;  // what the string, frame and stack tables hold, against framing::kMaxTableBytes
};

}  // namespace memtrace
