// A trace handed from its writer to its reader inside one process (a PyTorch snapshot read as it
// is imported): the file's bytes as a pipe would carry them, but each batch of events as the
// writer holds them, so that they are not encoded only to be decoded again on the other side.
// Bounded: a writer ahead of its reader waits, so memory does not grow with the trace.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "memtrace/format/event.h"

namespace memtrace {

class ChunkChannel {
 public:
  // What the writer put, in order: bytes (the file header, framed chunks) or a batch of events.
  struct Item {
    bool is_events = false;
    std::string bytes;
    std::vector<Event> events;
  };

  // The writer's side. Each false once the reader has gone (nothing more is read).
  bool put_bytes(const void* data, size_t size);
  // Takes EVENTS' contents (EVENTS is left empty, with the capacity of a batch the reader gave back).
  bool put_events(std::vector<Event>& events);
  // The end of the trace: the reader reads what was put, then the end.
  void close_writing();

  // The reader's side. The next item into OUT (its old contents given back for reuse); false at
  // the end.
  bool take(Item& out);
  // The reader goes: a writer waiting for room, or writing later, is told so.
  void close_reading();

 private:
  bool put(Item item);

  static constexpr size_t kMaxItems = 8;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Item> items_;
  std::vector<std::vector<Event>> spare_;  // event vectors the reader is done with
  bool writing_closed_ = false, reading_closed_ = false;
};

}  // namespace memtrace
