// Records copied out of a traced process's ring by the collector's main thread, for the process's
// worker to handle. Copying frees the ring's slots at once, whatever the worker is busy with
// (symbolizing a frame in a large library can take seconds), so a program never waits on it.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "memtrace/ring/consumer.h"

namespace memtrace {

class RecordBatch final : public RecordSink {
 public:
  void on_event(RingEvent& event, const uint64_t* native, size_t native_count, const uint64_t* python,
                size_t python_count, std::string_view name) override;
  void on_module(uint64_t bias, uint64_t start, uint64_t end, std::string path) override;
  void on_code(CodeDescription code) override;
  void on_device(int32_t ordinal, std::string name, uint64_t total_bytes, const uint8_t (&uuid)[16]) override;
  void on_started(uint32_t tid, uint16_t api, uint64_t t_ns) override;
  void on_notice(std::string text) override;

  // Hands every record to SINK, in the order they were copied.
  void replay(RecordSink& sink);
  bool empty() const { return entries_.empty() && dropped.empty(); }
  // Empties the batch and keeps its memory, for the next copy: memory touched once, not a fresh
  // page fault per record (a drain that copies a full ring is ~11 MB).
  void clear();
  // Room for RECORDS records before the batch grows (growing copies: fresh pages again).
  void reserve(size_t records) { entries_.reserve(records); }
  // Memory the batch's records take, roughly: what bounds a backlog. Its room (reserve, or kept from
  // an earlier use) is not counted: pages untouched take no memory, and a few records copied into a
  // batch with room for thousands must not count as thousands (the program would wait on a backlog
  // of nothing).
  size_t bytes() const;

  // Sequence numbers of events the producer could not deliver, known when the batch was copied.
  std::vector<uint64_t> dropped;

 private:
  struct Event {
    RingEvent event;
    size_t words_at;  // native frames, then (code, line) pairs, in words_
    uint32_t native_count, python_count;
    size_t name_at, name_bytes;  // in text_
  };
  struct Module {
    uint64_t bias, start, end;
    std::string path;
  };
  struct Device {
    int32_t ordinal;
    uint64_t total_bytes;
    std::string name;
    uint8_t uuid[16];
  };
  struct Started {
    uint32_t tid;
    uint16_t api;
    uint64_t t_ns;
  };
  struct Notice {
    std::string text;
  };
  std::vector<std::variant<Event, Module, CodeDescription, Device, Started, Notice>> entries_;
  std::vector<uint64_t> words_;
  std::string text_;
};

}  // namespace memtrace
