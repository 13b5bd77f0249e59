// Everything the collector keeps for one traced process image: its ring, the sequencer that
// orders its events, its trace file, and the running report for the end-of-run summary.
//
// Two threads share it. The collector's main thread only copies records out of the ring
// (drain) and says what happened (ended, snapshot, flush, finish); a worker thread of the
// process's own does the rest in that order: symbolizing stacks, writing the trace, replaying,
// snapshots. So a worker busy for seconds (a first frame in a large library, a slow debuginfod)
// never keeps the main thread from emptying every ring, and no program waits for it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "event_sequencer.h"
#include "memtrace/engine/pass.h"
#include "memtrace/engine/report.h"
#include "memtrace/format/trace_writer.h"
#include "memtrace/ring/consumer.h"
#include "memtrace/ring/kept_stacks.h"
#include "record_batch.h"
#include "snapshot_keeper.h"
#include "stack_builder.h"
#include "symbolizer.h"
#include "window.h"

namespace memtrace {

class TracedProcess : private RecordSink {
 public:
  // Python frames of the files in HIDDEN_PYTHON_DIR (memtrace's shim) are left out of its stacks.
  TracedProcess(int pid, int socket, ring::Mapping ring, std::unique_ptr<TraceWriter> writer,
                const pb::TraceHeader& header, Symbolizer& symbolizer, const SnapshotOptions& snapshots,
                const std::string& hidden_python_dir = {});
  ~TracedProcess();

  // What the main thread calls.
  int pid() const { return pid_; }
  int socket() const { return socket_; }
  bool ended() const { return ended_; }
  const std::string& trace_path() const { return writer_->path(); }
  // Copies what the process has published out of its ring for the worker. Returns the number of
  // events copied.
  size_t drain();
  // The last drain found its ring filling: a batch of records, or a quarter of a ring made small
  // (MEMTRACE_RING_BYTES), whichever is less.
  bool filling() const { return filling_; }
  // The process closed its end (it exited, exec'd or died): copies what is left, stepping over
  // records it died in the middle of writing.
  void mark_ended();
  // Asks the worker to write the footer once it has handled everything before; once.
  void finish(std::optional<int> exit_status, const std::string& end_reason, uint64_t end_ns);
  // The worker has written the footer: the report, snapshots and errors below are final.
  bool finished();
  void flush();
  // A snapshot of the process as it is when the worker reaches this request.
  // REPLY_TO: memtrace.record's number for the command, given back with the answer (replies()).
  void snapshot(pb::Snapshot::Reason reason, uint64_t now_ns, std::string reply_to = {});
  // memtrace.record's measures of a stretch of the run (window.h), in event order.
  void begin_window(uint64_t now_ns, std::string reply_to);
  void end_window(std::string reply_to);
  // What snapshot(), begin_window() and end_window() answered since the last call, in order, a
  // line each: "N snapshot PATH", "N window begun", "N window {JSON}" or "N failed WHY", N the
  // command's number (thread-safe: the worker answers).
  std::vector<std::string> replies();
  // More copied records wait for the worker than the collector lets one process hold: its ring
  // is left to fill (and the program to wait) until the worker catches up.
  bool backlogged() const;

  const std::vector<std::string>& snapshot_paths() const { return snapshots_.paths(); }
  const std::vector<std::string>& snapshot_errors() const { return snapshots_.errors(); }
  ProcessReport report() const { return report_; }
  std::vector<std::string> command;  // as the process was started, read when it introduced itself
  const std::string& write_error() const { return writer_->error(); }

  static constexpr size_t kMaxBacklogBytes = 256u << 20;
  // Records copied into one batch: the worker starts on a batch while the next is copied, and a
  // batch's memory is used again (kSpareBatches kept) rather than faulted in afresh.
  static constexpr size_t kBatchRecords = 4096;
  static constexpr size_t kSpareBatches = 8;

 private:
  // Work for the worker, in the order the main thread gave it.
  struct Work {
    enum class Kind { kRecords, kEnded, kSnapshot, kWindowBegin, kWindowEnd, kFlush, kFinish } kind = Kind::kRecords;
    RecordBatch records;
    pb::Snapshot::Reason reason = pb::Snapshot::REASON_UNKNOWN;
    uint64_t time_ns = 0;
    std::optional<int> exit_status;
    std::string end_reason;
    pb::Footer footer;
    std::unordered_map<uint32_t, uint64_t> thread_drops;  // kEnded: RingConsumer::thread_drops()
    std::vector<CallInProgress> calls;                    // kEnded: RingConsumer::calls_in_progress()
    std::string reply_to;  // memtrace.record's number for the command, when it waits for an answer
  };
  void submit(Work work);
  RecordBatch spare_batch();
  void keep_spare(RecordBatch batch);
  void work_loop();
  void handle(Work& work);
  void ended_in_worker(const Work& ended);
  void finish_in_worker(Work& work);
  void reply(const std::string& to, const std::string& line);

  void record(const RingEvent& raw);
  void on_event(RingEvent& event, const uint64_t* native, size_t native_count, const uint64_t* python,
                size_t python_count, std::string_view name) override;
  void on_module(uint64_t bias, uint64_t start, uint64_t end, std::string path) override;
  void on_code(CodeDescription code) override;
  void on_device(int32_t ordinal, std::string name, uint64_t total_bytes, const uint8_t (&uuid)[16]) override;
  void on_started(uint32_t tid, uint16_t api, uint64_t t_ns) override;
  void on_notice(std::string text) override;

  // The main thread's.
  int pid_;
  int socket_;
  RingConsumer ring_;
  bool ended_ = false;
  bool filling_ = false;
  bool finish_requested_ = false;
  bool joined_ = false;

  // Between the two.
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Work> queue_;
  size_t queued_bytes_ = 0;
  std::vector<RecordBatch> spare_batches_;  // handled and emptied, their memory kept
  bool done_ = false;                       // the worker wrote the footer and stopped
  std::mutex replies_mutex_;
  std::vector<std::string> replies_;  // the worker's, for replies()
  std::thread worker_;

  // The worker's.
  std::unique_ptr<TraceWriter> writer_;
  uint64_t origin_ns_;
  EventSequencer sequencer_;
  StackBuilder stacks_;
  KeptStacks kept_stacks_;
  // Calls started and not yet recorded, by thread (a thread makes one recorded call at a time), of
  // the threads that had no in-call slot (ring::StartedRecord).
  std::unordered_map<uint32_t, std::pair<uint16_t, uint64_t>> in_flight_;
  // Each thread's latest event, by its seq: whether the call its in-call slot holds was recorded;
  // and the stack id of its kept stack (RingEvent::stack_kept), while the modules it was made
  // under (StackBuilder::generation) stand.
  struct ThreadSeen {
    uint64_t seq = 0;
    uint64_t kept_stack_id = 0;
    uint64_t kept_generation = 0;  // 0: none
  };
  std::unordered_map<uint32_t, ThreadSeen> threads_seen_;
  std::vector<std::string> notices_;  // for the footer, each once
  bool stopped_on_purpose_ = false;   // memtrace.stop, memtrace detach: the process lives on
  uint64_t last_t_ = 0;
  uint64_t observations_ = 0;  // events that are not calls (is_observation)
  ReportBuilder summary_{0};   // calls and peaks, for the run's last lines: no sites
  SnapshotKeeper snapshots_;
  Window window_;
  PassDriver driver_;  // the replay of the process's events, feeding the summary and the snapshots
  ProcessReport report_;
};

}  // namespace memtrace
