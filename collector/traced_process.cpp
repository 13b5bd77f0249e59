#include "traced_process.h"

#include <unistd.h>

#include <algorithm>

#include "memtrace/base/units.h"
#include "memtrace/format/run_folder.h"
#include "memtrace/importers/torch_history.h"

namespace memtrace {

namespace {
// As nvidia-smi and CUDA_VISIBLE_DEVICES write it: GPU-8-4-4-4-12 hex digits. Empty when unknown.
std::string format_uuid(const uint8_t (&uuid)[16]) {
  bool known = false;
  for (uint8_t b : uuid) known |= b != 0;
  if (!known) return {};
  std::string text = "GPU-";
  static const char kHex[] = "0123456789abcdef";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) text += '-';
    text += kHex[uuid[i] >> 4];
    text += kHex[uuid[i] & 15];
  }
  return text;
}
}  // namespace

TracedProcess::TracedProcess(int pid, int socket, ring::Mapping ring, std::unique_ptr<TraceWriter> writer,
                             const pb::TraceHeader& header, Symbolizer& symbolizer, const SnapshotOptions& snapshots,
                             const std::string& hidden_python_dir)
    : pid_(pid),
      socket_(socket),
      ring_(ring),
      writer_(std::move(writer)),
      origin_ns_(header.origin_monotonic_ns()),
      stacks_(symbolizer, *writer_, hidden_python_dir),
      kept_stacks_(ring_.slot_count()),
      snapshots_(snapshots, header, *writer_),
      window_(*writer_, hidden_python_dir) {
  driver_.add(summary_).add(snapshots_).add(window_);
  worker_ = std::thread([this] { work_loop(); });  // last: it uses every member above
}

TracedProcess::~TracedProcess() {
  if (!finish_requested_) finish(std::nullopt, "still running when memtrace stopped", 0);
  if (worker_.joinable()) worker_.join();
  if (socket_ >= 0) ::close(socket_);
}

// The main thread's side.

void TracedProcess::submit(Work work) {
  size_t bytes = work.records.bytes();
  {
    std::lock_guard lock(mutex_);
    queued_bytes_ += bytes;
    queue_.push_back(std::move(work));
  }
  wake_.notify_one();
}

RecordBatch TracedProcess::spare_batch() {
  {
    std::lock_guard lock(mutex_);
    if (!spare_batches_.empty()) {
      RecordBatch batch = std::move(spare_batches_.back());
      spare_batches_.pop_back();
      return batch;
    }
  }
  RecordBatch batch;
  batch.reserve(kBatchRecords);
  return batch;
}

void TracedProcess::keep_spare(RecordBatch batch) {
  batch.clear();
  std::lock_guard lock(mutex_);
  if (spare_batches_.size() < kSpareBatches) spare_batches_.push_back(std::move(batch));
}

size_t TracedProcess::drain() {
  filling_ = false;
  if (finish_requested_) return 0;
  // Batch by batch, about one ring's worth at most: the main thread goes back to the other processes.
  size_t events = 0, taken = 0;
  while (taken < ring_.slot_count()) {
    Work work;
    work.records = spare_batch();
    ring_.take_dropped(work.records.dropped);
    RingConsumer::Drained drained = ring_.drain(work.records, ended_, kBatchRecords);
    events += drained.events;
    taken += drained.taken;
    if (work.records.empty())
      keep_spare(std::move(work.records));
    else
      submit(std::move(work));
    if (drained.taken < kBatchRecords) break;
  }
  filling_ = taken >= std::min<uint64_t>(kBatchRecords, ring_.slot_count() / 4);
  return events;
}

void TracedProcess::mark_ended() {
  if (ended_) return;
  ended_ = true;
  drain();
  Work work;
  work.kind = Work::Kind::kEnded;
  work.thread_drops = ring_.thread_drops();
  work.calls = ring_.calls_in_progress();
  submit(std::move(work));
  if (socket_ >= 0) {
    ::close(socket_);
    socket_ = -1;
  }
}

void TracedProcess::snapshot(pb::Snapshot::Reason reason, uint64_t now_ns, std::string reply_to) {
  if (finish_requested_) return reply(reply_to, "failed the recording is ending");
  drain();
  Work work;
  work.kind = Work::Kind::kSnapshot;
  work.reply_to = std::move(reply_to);
  work.reason = reason;
  work.time_ns = now_ns > origin_ns_ ? now_ns - origin_ns_ : 0;
  submit(std::move(work));
}

void TracedProcess::begin_window(uint64_t now_ns, std::string reply_to) {
  if (finish_requested_) return reply(reply_to, "failed the recording is ending");
  drain();
  Work work;
  work.kind = Work::Kind::kWindowBegin;
  work.reply_to = std::move(reply_to);
  work.time_ns = now_ns > origin_ns_ ? now_ns - origin_ns_ : 0;
  submit(std::move(work));
}

void TracedProcess::end_window(std::string reply_to) {
  if (finish_requested_) return reply(reply_to, "failed the recording is ending");
  drain();
  Work work;
  work.kind = Work::Kind::kWindowEnd;
  work.reply_to = std::move(reply_to);
  submit(std::move(work));
}

void TracedProcess::reply(const std::string& to, const std::string& line) {
  if (to.empty()) return;  // nobody waits (SIGUSR1, periodic snapshots)
  std::lock_guard lock(replies_mutex_);
  replies_.push_back(to + " " + line);
}

std::vector<std::string> TracedProcess::replies() {
  std::lock_guard lock(replies_mutex_);
  return std::exchange(replies_, {});
}

void TracedProcess::flush() {
  if (finish_requested_) return;
  Work work;
  work.kind = Work::Kind::kFlush;
  submit(std::move(work));
}

void TracedProcess::finish(std::optional<int> exit_status, const std::string& end_reason, uint64_t end_ns) {
  if (finish_requested_) return;
  mark_ended();
  finish_requested_ = true;
  Work work;
  work.kind = Work::Kind::kFinish;
  work.exit_status = exit_status;
  work.end_reason = end_reason;
  // What the ring knows is read here, where the ring is read: the worker never touches it.
  work.footer.set_end_ns(end_ns > origin_ns_ ? end_ns - origin_ns_ : 0);
  if (exit_status) work.footer.set_exit_status(*exit_status);
  work.footer.set_end_reason(end_reason);
  work.footer.set_dropped_events(ring_.dropped_events());
  work.footer.set_incomplete_records(ring_.incomplete_records());
  work.footer.set_longest_wait_ns(ring_.longest_wait_ns());
  submit(std::move(work));
}

bool TracedProcess::finished() {
  if (joined_) return true;
  {
    std::lock_guard lock(mutex_);
    if (!done_) return false;
  }
  worker_.join();
  joined_ = true;
  return true;
}

bool TracedProcess::backlogged() const {
  std::lock_guard lock(mutex_);
  return queued_bytes_ > kMaxBacklogBytes;
}

// The worker's side.

void TracedProcess::work_loop() {
  for (;;) {
    Work work;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [this] { return !queue_.empty(); });
      work = std::move(queue_.front());
      queue_.pop_front();
    }
    size_t bytes = work.records.bytes();
    handle(work);
    if (work.kind == Work::Kind::kRecords) keep_spare(std::move(work.records));
    bool last = work.kind == Work::Kind::kFinish;
    {
      std::lock_guard lock(mutex_);
      queued_bytes_ -= bytes;
      if (last) done_ = true;
    }
    if (last) return;
  }
}

void TracedProcess::handle(Work& work) {
  auto emit = [this](const RingEvent& e) { record(e); };
  switch (work.kind) {
    case Work::Kind::kRecords:
      for (uint64_t seq : work.records.dropped) sequencer_.skip(seq, emit);
      work.records.replay(*this);
      break;
    case Work::Kind::kEnded: ended_in_worker(work); break;
    case Work::Kind::kSnapshot: {
      const size_t before = snapshots_.paths().size();
      snapshots_.take(work.reason, work.time_ns, driver_.replay());
      reply(work.reply_to, snapshots_.paths().size() > before
                               ? "snapshot " + snapshots_.paths().back()
                               : "failed the snapshot could not be written (memtrace's message says why)");
      break;
    }
    case Work::Kind::kWindowBegin:
      window_.begin(driver_.replay(), work.time_ns);
      reply(work.reply_to, "window begun");  // the program waits for it: its next calls fall inside
      break;
    case Work::Kind::kWindowEnd: reply(work.reply_to, "window " + window_.end(driver_.replay())); break;
    case Work::Kind::kFlush: writer_->flush(); break;
    case Work::Kind::kFinish: finish_in_worker(work); break;
  }
}

// The one conversion of an event from the ring's form to the trace's: times relative to the
// run's origin (never going backwards within a process: events that raced to the clock on two
// threads are ordered by their sequence numbers instead), the layer its API belongs to, and
// nothing taken on trust from the process's memory (an API or kind it does not know is unknown).
void TracedProcess::record(const RingEvent& raw) {
  Event e = raw.event;
  uint64_t t = e.t_ns > origin_ns_ ? e.t_ns - origin_ns_ : 0;
  last_t_ = e.t_ns = t > last_t_ ? t : last_t_;
  if (static_cast<uint16_t>(e.api) >= static_cast<uint16_t>(Api::kCount)) e.api = Api::kUnknown;
  if (static_cast<uint8_t>(e.kind) >= static_cast<uint8_t>(MemKind::kCount)) e.kind = MemKind::kUnknown;
  e.layer = api_info(e.api).layer;
  if (is_observation(e.api)) ++observations_;
  writer_->add(e);
  driver_.feed(e);
}

// Stacks are resolved as records arrive, in ring order: the modules and code objects they name
// were reported before them, and a library unloaded later cannot change what they meant.
void TracedProcess::on_event(RingEvent& event, const uint64_t* native, size_t native_count, const uint64_t* python,
                             size_t python_count, std::string_view name) {
  if (!in_flight_.empty()) in_flight_.erase(event.event.tid);
  ThreadSeen& seen = threads_seen_[event.event.tid];
  seen.seq = event.seq;
  // A name (marks, ranges, categories) goes in the string table now; the event carries its id.
  event.event.name = api_info(event.event.api).aux == AuxField::kName ? writer_->intern_string(name) : 0;
  // The frames the record took from its thread's kept stack; a loop allocating from one place
  // repeats that stack: its id, not a lookup.
  const KeptStacks::Stack stack = kept_stacks_.resolve(event, native, native_count, python, python_count);
  event.stack_truncated |= !stack.whole;
  if (stack.repeats && seen.kept_generation == stacks_.generation())
    event.event.stack_id = seen.kept_stack_id;
  else
    event.event.stack_id = stacks_.intern(stack.native, stack.native_count, stack.python, stack.python_count,
                                          event.python_state, event.stack_truncated);
  if (event.stack_kept) {
    seen.kept_stack_id = event.event.stack_id;
    seen.kept_generation = stacks_.generation();
  }
  sequencer_.push(event, [this](const RingEvent& e) { record(e); });
}

void TracedProcess::on_started(uint32_t tid, uint16_t api, uint64_t t_ns) {
  if (api == ring::kStoppedOnPurpose)
    stopped_on_purpose_ = true;
  else
    in_flight_[tid] = {api, t_ns};
}

void TracedProcess::on_module(uint64_t bias, uint64_t start, uint64_t end, std::string path) {
  stacks_.add_module(bias, start, end, std::move(path));
}

void TracedProcess::on_code(CodeDescription code) { stacks_.add_code(std::move(code)); }

void TracedProcess::on_notice(std::string text) {
  if (notices_.size() < 16 && std::find(notices_.begin(), notices_.end(), text) == notices_.end())
    notices_.push_back(std::move(text));
}

void TracedProcess::on_device(int32_t ordinal, std::string name, uint64_t total_bytes, const uint8_t (&uuid)[16]) {
  pb::Device device;
  device.set_ordinal(ordinal);
  device.set_name(std::move(name));
  device.set_total_bytes(total_bytes);
  device.set_uuid(format_uuid(uuid));
  writer_->add_device(device);
}

// Calls the process was inside when it died: the device may have done them. They go in the
// trace as interrupted, so nothing the device counted is missing from it. A call whose record was
// delivered, or dropped (counted as lost), is not one: for a thread with an in-call slot its seq
// says so; for one without, a drop after the call started.
void TracedProcess::ended_in_worker(const Work& ended) {
  sequencer_.flush([this](const RingEvent& e) { record(e); });
  struct Interrupted {
    uint32_t tid;
    Api api;
    uint64_t t_ns;  // when it took its place in the order or started; 0: unknown (the trace's end)
  };
  std::vector<Interrupted> calls;
  auto interrupted = [&calls](uint32_t tid, uint16_t api, uint64_t t_ns) {
    calls.push_back({tid, api < static_cast<uint16_t>(Api::kCount) ? static_cast<Api>(api) : Api::kUnknown, t_ns});
  };
  for (const auto& [tid, call] : in_flight_) {
    auto drop = ended.thread_drops.find(tid);
    if (drop == ended.thread_drops.end() || drop->second <= call.second) interrupted(tid, call.first, call.second);
  }
  in_flight_.clear();
  for (const CallInProgress& call : ended.calls) {
    if (call.seq != 0) {
      auto seen = threads_seen_.find(call.tid);
      if (seen != threads_seen_.end() && seen->second.seq + 1 >= call.seq) continue;
      auto drop = ended.thread_drops.find(call.tid);
      if (drop != ended.thread_drops.end() && drop->second >= call.t_ns) continue;
    }
    interrupted(call.tid, call.api, call.t_ns);
  }
  // Stopped on purpose, the process lives on: its calls in flight end after the trace does.
  if (stopped_on_purpose_) {
    if (!calls.empty())
      on_notice(counted(calls.size(), "call") + " in progress when recording stopped (" +
                std::string(api_info(calls.front().api).name) + (calls.size() > 1 ? ", ..." : "") +
                ") ended after it: not in this trace");
    return;
  }
  for (const Interrupted& call : calls) {
    RingEvent e;
    e.event.tid = call.tid;
    e.event.api = call.api;
    e.event.kind = api_info(e.event.api).kind;
    e.event.t_ns = call.t_ns;
    e.event.result = kInterruptedCall;
    record(e);
  }
}

void TracedProcess::finish_in_worker(Work& work) {
  for (const std::string& notice : notices_) work.footer.add_notices(notice);
  writer_->finish(work.footer);
  // What PyTorch's own recorder kept, where memtrace could not attach to its allocator live.
  if (std::vector<std::string> readings = run_folder::torch_history_of(writer_->path(), pid_); !readings.empty()) {
    std::string error;
    if (!merge_torch_history(writer_->path(), readings, error))
      notices_.push_back("PyTorch's own recorder's readings could not be merged into the trace: " + error);
  }
  snapshots_.finish(work.exit_status, driver_.replay());
  summary_.finish(report_);
  report_.pid = pid_;
  report_.trace_path = writer_->path();
  report_.exit_status = work.exit_status;
  report_.end_reason = work.end_reason;
  report_.events = writer_->events_written() - observations_;  // calls; samples and records are not
  report_.dropped_events = work.footer.dropped_events();
  report_.incomplete_records = work.footer.incomplete_records();
  report_.longest_wait_ns = work.footer.longest_wait_ns();
  report_.end_time_ns = work.footer.end_ns();
  report_.complete = !writer_->failed();
  report_.problem = writer_->error();
  report_.notices = notices_;
}

}  // namespace memtrace
