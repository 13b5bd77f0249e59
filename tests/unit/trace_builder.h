// Hand-built traces for the analyses' unit tests: written event by event, with a clock that
// advances 1 µs an event and sites named by the function their one frame is in.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "memtrace/engine/process_analysis.h"
#include "memtrace/format/trace_writer.h"

namespace memtrace::testing {

constexpr uint64_t kMiB = 1 << 20;

// Writes a trace event by event; sites are named by the function their one frame is in.
class TraceBuilder {
 public:
  // A trace named NAME in DIR, where it stays; or, without DIR, in the temporary folder under a name
  // made unique, removed with the builder.
  // PID and RANK: the process's, as its header says them.
  explicit TraceBuilder(const std::string& name, const std::string& dir = "", int32_t pid = 42,
                        std::optional<int32_t> rank = std::nullopt) {
    path_ = dir.empty() ? (std::filesystem::temp_directory_path() /
                           ("memtrace-analysis-" + std::to_string(::getpid()) + "-" + name + ".memtrace"))
                              .string()
                        : dir + "/" + name + ".memtrace";
    remove_ = dir.empty();
    std::filesystem::remove(path_);
    std::string error;
    writer_ = TraceWriter::create(path_, error);
    EXPECT_TRUE(writer_) << error;
    pb::TraceHeader header;
    header.set_pid(pid);
    if (rank) header.set_rank(*rank);
    header.add_command("hand-built");
    writer_->write_header(header);
  }
  ~TraceBuilder() {
    if (remove_) std::filesystem::remove(path_);
  }

  // A stack of FRAMES, innermost first; then alloc() with the name given here allocates from it.
  void stack(const std::string& name, const std::vector<FrameInfo>& frames) {
    std::vector<uint64_t> ids;
    for (const FrameInfo& f : frames) ids.push_back(writer_->intern_frame(f));
    sites_[name] = writer_->intern_stack(ids);
  }

  uint64_t site(const std::string& function) {
    auto it = sites_.find(function);
    if (it != sites_.end()) return it->second;
    FrameInfo f;
    f.address = 0x1000 + sites_.size();
    f.module = "/bin/app";
    f.function = function;
    f.file = "app.cpp";
    f.line = 10;
    return sites_[function] = writer_->intern_stack({writer_->intern_frame(f)});
  }
  // AUX: the field the API names (a region's heap, a mapping's handle).
  void alloc(Api api, uint64_t addr, uint64_t size, const std::string& function, uint64_t aux = 0, int result = 0) {
    Event e = base(api);
    e.addr = addr;
    e.size = size;
    set_aux_value(e, aux);
    e.result = result;
    e.device = 0;
    e.stack_id = site(function);
    writer_->add(e);
  }
  void free(Api api, uint64_t addr) {
    Event e = base(api);
    e.addr = addr;
    writer_->add(e);
  }
  void mark(Api api, const std::string& name, uint64_t id = 0) {
    Event e = base(api);
    e.name = writer_->intern_string(name);
    e.addr = id;
    writer_->add(e);
  }
  // One of PyTorch's counters as the Python shim records it ("exit:requested_bytes.all.peak").
  void counter(const std::string& name, uint64_t value, int32_t device = 0) {
    Event e = base(Api::kTorchCounter);
    e.name = writer_->intern_string(name);
    e.device = device;
    e.size = value;
    writer_->add(e);
  }
  // One of CUPTI's memory activity records (memtrace run --verify).
  void cupti_record(uint64_t addr, uint64_t size, MemKind kind = MemKind::kDevice) {
    Event e = base(Api::kCuptiMemoryAlloc);
    e.kind = kind;
    e.addr = addr;
    e.size = size;
    e.device = 0;
    writer_->add(e);
  }
  std::string finish() {
    pb::Footer footer;
    footer.set_end_ns(t_ + 1);
    footer.set_exit_status(0);
    footer.set_end_reason("exited");
    writer_->finish(footer);
    return path_;
  }
  ProcessAnalysis analyze(AnalysisOptions options = {}) {
    ProcessAnalysis out;
    std::string error;
    EXPECT_TRUE(analyze_process(finish(), options, out, error)) << error;
    return out;
  }

 private:
  Event base(Api api) {
    Event e;
    e.api = api;
    e.kind = api_info(api).kind;
    e.layer = api_info(api).layer;
    e.t_ns = t_ += 1000;
    e.tid = 7;
    return e;
  }
  std::string path_;
  bool remove_ = true;
  std::unique_ptr<TraceWriter> writer_;
  std::map<std::string, uint64_t> sites_;
  uint64_t t_ = 0;
};

}  // namespace memtrace::testing
