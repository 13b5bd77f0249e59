// A device's trace entries kept between the snapshot import's two passes, in a temporary file of
// their own, a few bytes each: the second pass reads them back instead of parsing the pickle again.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "snapshot_state.h"

namespace memtrace::snapshot {

class EntrySpill {
 public:
  // A spill in a new temporary file, unlinked from the start (it goes with the process), in
  // $TMPDIR or else /tmp; null when no such file can be made.
  static std::unique_ptr<EntrySpill> create();
  ~EntrySpill();
  EntrySpill(const EntrySpill&) = delete;
  EntrySpill& operator=(const EntrySpill&) = delete;

  // Writing: each entry in order (its device is not kept); finish() once all are in. False once a
  // write failed (the disk full): nothing is read back then.
  void add(const Entry& e);
  bool finish();
  // Reading back, after finish(): the next entry into OUT (device 0); false at the end, or when the
  // file could not be read (then error() says why).
  bool next(Entry& out);
  const std::string& error() const { return error_; }
  size_t count() const { return count_; }

 private:
  explicit EntrySpill(int fd) : fd_(fd) {}
  bool flush();
  bool refill();

  int fd_;
  std::string buffer_;  // writing: what is not written yet; reading: what is read and not decoded
  size_t at_ = 0;       // reading: the next byte of buffer_
  uint64_t read_offset_ = 0;
  bool failed_ = false, finished_ = false, at_end_ = false;
  size_t count_ = 0;
  uint64_t last_addr_ = 0;  // each entry's address and time are written as the change from the last
  int64_t last_time_ = 0;
  std::string error_;
};

}  // namespace memtrace::snapshot
