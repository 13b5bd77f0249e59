// Everything the collector keeps for one traced process image: its ring, the sequencer that
// orders its events, its trace file, and the running report for the end-of-run summary.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "event_sequencer.h"
#include "memtrace/analysis/replay.h"
#include "memtrace/analysis/report.h"
#include "memtrace/format/trace_writer.h"
#include "ring_consumer.h"
#include "snapshot_keeper.h"
#include "stack_builder.h"
#include "symbolizer.h"

namespace memtrace {

class TracedProcess : private RecordSink {
 public:
  TracedProcess(int pid, int socket, ring::Mapping ring, std::unique_ptr<TraceWriter> writer,
                const pb::TraceHeader& header, Symbolizer& symbolizer, const SnapshotOptions& snapshots);
  ~TracedProcess();

  int pid() const { return pid_; }
  int socket() const { return socket_; }
  bool ended() const { return ended_; }
  bool finished() const { return finished_; }
  const std::string& trace_path() const { return writer_->path(); }

  // Moves what the process has published into the trace. Returns the number of events read.
  size_t drain();
  // The process closed its end (it exited, exec'd or died): read what is left, stepping over
  // records it died in the middle of writing.
  void mark_ended();
  // Writes the footer. Safe to call once; the report of what was recorded is then final.
  void finish(std::optional<int> exit_status, const std::string& end_reason, uint64_t end_ns);
  void flush() { writer_->flush(); }
  // A snapshot of the process as it is now (after draining its ring).
  void snapshot(pb::Snapshot::Reason reason, uint64_t now_ns);
  const std::vector<std::string>& snapshot_paths() const { return snapshots_.paths(); }
  const std::vector<std::string>& snapshot_errors() const { return snapshots_.errors(); }

  ProcessReport report() const { return report_; }
  std::vector<std::string> command;  // as the process was started, read when it introduced itself
  const std::string& write_error() const { return writer_->error(); }

 private:
  void record(const RawEvent& raw);
  void on_event(RawEvent& event, const uint64_t* native, size_t native_count, const uint64_t* python,
                size_t python_count, std::string_view name) override;
  void on_module(uint64_t bias, uint64_t start, uint64_t end, std::string path) override;
  void on_code(uint64_t code, std::string name, std::string file) override;
  void on_device(int32_t ordinal, std::string name, uint64_t total_bytes) override;
  void on_started(uint32_t tid, uint16_t api, uint64_t t_ns) override;

  int pid_;
  int socket_;
  RingConsumer ring_;
  std::unique_ptr<TraceWriter> writer_;
  uint64_t origin_ns_;
  EventSequencer sequencer_;
  StackBuilder stacks_;
  // Calls started and not yet recorded, by thread (a thread makes one recorded call at a time).
  std::unordered_map<uint32_t, std::pair<uint16_t, uint64_t>> in_flight_;
  std::vector<uint64_t> dropped_;
  uint64_t last_t_ = 0;
  Replay replay_;
  ReportBuilder summary_;
  SnapshotKeeper snapshots_;
  ProcessReport report_;
  bool ended_ = false;
  bool finished_ = false;
};

}  // namespace memtrace
