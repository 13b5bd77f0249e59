// A device's trace entries kept between the snapshot import's two passes, in a temporary file of
// their own, a few bytes each: the second pass reads them back instead of parsing the pickle again.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "snapshot_state.h"

namespace memtrace::snapshot {

class EntrySpill {
 public:
  // Told of each entry added, in order, on the spill's own thread (where the first pass has a core
  // to spare), also where the file failed.
  using Follower = std::function<void(const Entry&)>;

  // A spill in a new temporary file, unlinked from the start (it goes with the process), in
  // $TMPDIR or else /tmp; null when no such file can be made. FOLLOWER, if any, is told of every
  // entry by the time finish() returns (and not after the spill is gone).
  static std::unique_ptr<EntrySpill> create(Follower follower = nullptr);
  ~EntrySpill();
  EntrySpill(const EntrySpill&) = delete;
  EntrySpill& operator=(const EntrySpill&) = delete;

  // Writing: each entry in order (its device is not kept), encoded and written on a thread of the
  // spill's own (from its first few thousand entries on); finish() once all are in. False once a
  // write failed (the disk full): nothing is read back then.
  void add(const Entry& e);
  bool finish();
  // Reading back, after finish(): the next entry into OUT (device 0); false at the end, or when the
  // file could not be read (then error() says why).
  bool next(Entry& out);
  const std::string& error() const { return error_; }
  size_t count() const { return count_; }

 private:
  EntrySpill(int fd, Follower follower) : fd_(fd), follower_(std::move(follower)) {}
  void hand_over();
  void write_batches();
  void stop_writer();
  void encode(const std::vector<Entry>& entries);
  bool flush();
  bool refill();

  int fd_;
  Follower follower_;
  std::vector<Entry> batch_;  // added, not yet handed over
  // The writer's thread and what is handed to it: one batch at a time, in order.
  std::thread writer_;
  bool writer_failed_ = false;  // no thread to be had: written where added
  std::mutex mutex_;
  std::condition_variable handed_cv_, taken_;
  std::vector<Entry> handed_;
  bool handed_full_ = false, closing_ = false;
  // Writing (the writer's thread, until finish()): what is not written yet; reading: what is read
  // and not decoded.
  std::string buffer_;
  size_t at_ = 0;  // reading: the next byte of buffer_
  uint64_t read_offset_ = 0;
  bool failed_ = false, finished_ = false, at_end_ = false;
  size_t count_ = 0;
  uint64_t last_addr_ = 0;  // each entry's address and time are written as the change from the last
  int64_t last_time_ = 0;
  std::string error_;
};

}  // namespace memtrace::snapshot
