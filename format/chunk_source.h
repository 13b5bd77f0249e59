// Reads a trace's chunks one after another: framing, checksum, decompression, parsing. It can
// run ahead on a thread of its own (prefetch), so that a reader decoding and analyzing events
// on one core has the next chunks ready from another. Private to the reader.
#pragma once

#include <array>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "event_batch_wire.h"
#include "memtrace.pb.h"
#include "memtrace/format/chunk_channel.h"
#include "memtrace/format/event.h"
#include "memtrace/format/freed_references.h"

namespace memtrace {

// One chunk as read from the file.
struct RawChunk {
  enum class Status { kOk, kEnd, kCut, kCorrupt };
  Status status = Status::kOk;
  pb::Chunk chunk;
  pb::EventBatch batch;       // the body of an events chunk (then `chunk` is empty)
  std::vector<Event> events;  // and its events, decoded
  bool is_events = false;
  uint64_t offset = 0;      // where the chunk starts
  uint64_t end_offset = 0;  // where the next one starts (kEnd, kCut: where the file ends)
  uint64_t problem_offset = 0;
  std::string problem;         // kCut: the whole sentence; kCorrupt: what is wrong at problem_offset
  bool out_of_memory = false;  // read ahead, it could not be held: thrown again on the reader's thread
};

class ChunkSource {
 public:
  // Reads FILE (which stays the caller's) from OFFSET; FILE_SIZE is 0 when unknown.
  ChunkSource(std::FILE* file, uint64_t offset, uint64_t file_size)
      : file_(file), offset_(offset), file_size_(file_size) {}
  // Reads what a writer in this process puts into CHANNEL (its events as they are).
  explicit ChunkSource(std::shared_ptr<ChunkChannel> channel) : channel_(std::move(channel)) {}
  ~ChunkSource();
  ChunkSource(const ChunkSource&) = delete;
  ChunkSource& operator=(const ChunkSource&) = delete;

  // From now on, read ahead on a thread, a few chunks at most.
  void prefetch();
  // The next chunk; it stays valid until the next call. After a chunk whose status is not kOk,
  // there is no other.
  RawChunk& next();
  // Up to SIZE bytes into INTO, before any chunk is read (the file header): how many there were.
  size_t read_bytes(void* into, size_t size);

 private:
  void read(RawChunk& out);
  void run_ahead();
  size_t fetch(void* into, size_t size);  // from the file or the channel

  std::FILE* file_ = nullptr;
  uint64_t offset_ = 0;
  uint64_t file_size_ = 0;
  std::shared_ptr<ChunkChannel> channel_;
  ChunkChannel::Item item_;  // the channel's item being read
  size_t item_read_ = 0;     // of its bytes
  std::string buffer_, unpacked_;
  uint64_t stacks_seen_ = 1;         // stack 0 is "no stack"; the reader checks the tables themselves
  std::vector<uint64_t> freed_;      // the batch's freed column
  FreedReferenceReader references_;  // and the trace's references so far
  RawChunk current_;                 // without prefetch

  static constexpr size_t kAhead = 4;
  std::array<RawChunk, kAhead> ring_;
  uint64_t produced_ = 0, consumed_ = 0;  // chunks put in the ring, and given back by the reader
  bool holding_ = false;                  // the reader holds ring_[consumed_ % kAhead]
  bool stop_ = false;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::thread thread_;
};

}  // namespace memtrace
