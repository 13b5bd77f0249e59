// Turns the raw stack of an event (return addresses and Python code objects) into one interned
// stack of the trace: native frames symbolized (inlined calls as frames of their own), and the
// Python frames standing where the interpreter's evaluation loop stood, as memray's hybrid
// stacks do.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "memtrace/format/trace_writer.h"
#include "memtrace/ring/consumer.h"
#include "symbolizer.h"

namespace memtrace {

class StackBuilder {
 public:
  // Python frames of the files in HIDDEN_PYTHON_DIR (memtrace's own shim; ends with /) are left
  // out of every stack.
  StackBuilder(Symbolizer& symbolizer, TraceWriter& writer, std::string hidden_python_dir = {})
      : symbolizer_(symbolizer), writer_(writer), hidden_python_dir_(std::move(hidden_python_dir)) {}

  void add_module(uint64_t bias, uint64_t start, uint64_t end, std::string path);
  void add_code(CodeDescription code);
  // Counts the module reports: a stack id stands for the same frames while it is unchanged
  // (never 0).
  uint64_t generation() const { return generation_; }
  // The trace's stack id for these frames; 0 for none.
  uint64_t intern(const uint64_t* native, size_t native_count, const uint64_t* python, size_t python_count,
                  uint8_t python_state, bool truncated);

 private:
  struct Native {
    std::vector<uint64_t> frame_ids;  // innermost first
    bool eval_loop = false;           // CPython's evaluation loop: Python frames go here
  };
  struct Module {
    uint64_t end, bias;
    std::string path;
  };
  const Native& native_frame(uint64_t address);
  // The frame of code CODE at instruction byte OFFSET (its line, for code described by lines);
  // 0 for code of the hidden file.
  uint64_t python_frame(uint64_t code, uint64_t offset);

  Symbolizer& symbolizer_;
  TraceWriter& writer_;
  std::string hidden_python_dir_;
  uint64_t generation_ = 1;
  std::map<uint64_t, Module> modules_;                  // by start address; a later report replaces an overlap
  std::unordered_map<uint64_t, CodeDescription> code_;  // by id
  std::unordered_map<uint64_t, Native> natives_;
  std::map<std::pair<uint64_t, uint64_t>, uint64_t> pythons_;
  // Raw stacks as the ring carried them (return addresses, Python pairs, flags: their bytes) ->
  // stack id. The keys stay put in stack_keys_; a lookup builds its key in key_, which keeps its
  // room, and hashes it a word at a time: a std::string key cost an allocation an event, and
  // std::hash about an instruction a byte.
  struct WordsHash {
    size_t operator()(std::string_view bytes) const;
  };
  std::unordered_map<std::string_view, uint64_t, WordsHash> stacks_;
  std::deque<std::string> stack_keys_;
  std::string key_;
  std::vector<uint64_t> scratch_;
};

}  // namespace memtrace
