#include "traced_process.h"

#include <unistd.h>

namespace memtrace {

TracedProcess::TracedProcess(int pid, int socket, ring::Mapping ring, std::unique_ptr<TraceWriter> writer,
                             const pb::TraceHeader& header, Symbolizer& symbolizer, const SnapshotOptions& snapshots)
    : pid_(pid),
      socket_(socket),
      ring_(ring),
      writer_(std::move(writer)),
      origin_ns_(header.origin_monotonic_ns()),
      stacks_(symbolizer, *writer_),
      snapshots_(snapshots, header, *writer_) {}

TracedProcess::~TracedProcess() {
  if (socket_ >= 0) ::close(socket_);
}

void TracedProcess::record(const RawEvent& raw) {
  Event e;
  // Times are relative to the run's origin and never go backwards within a process: events that
  // raced to the clock on two threads are ordered by their sequence numbers instead.
  uint64_t t = raw.t_ns > origin_ns_ ? raw.t_ns - origin_ns_ : 0;
  last_t_ = e.t_ns = t > last_t_ ? t : last_t_;
  e.tid = raw.tid;
  e.api = raw.api < static_cast<uint16_t>(Api::kCount) ? static_cast<Api>(raw.api) : Api::kUnknown;
  e.kind = raw.kind < static_cast<uint8_t>(MemKind::kCount) ? static_cast<MemKind>(raw.kind) : MemKind::kUnknown;
  e.layer = api_info(e.api).layer;
  e.device = raw.device;
  e.stream = raw.stream;
  e.addr = raw.addr;
  e.size = raw.size;
  e.aux = raw.aux;
  e.result = raw.result;
  e.stack_id = raw.stack_id;
  e.device_free = raw.device_free;
  e.device_total = raw.device_total;
  writer_->add(e);
  snapshots_.before_event(e, replay_);
  const ReplayStep& step = replay_.apply(e);
  summary_.add(step);
  snapshots_.on_event(e, step, replay_);
}

// Stacks are resolved as records arrive, in ring order: the modules and code objects they name
// were reported before them, and a library unloaded later cannot change what they meant.
void TracedProcess::on_event(RawEvent& event, const uint64_t* native, size_t native_count, const uint64_t* python,
                             size_t python_count, std::string_view name) {
  in_flight_.erase(event.tid);
  // A mark's name goes in the string table now; the event carries its id.
  if (api_info(static_cast<Api>(event.api)).op == Op::kMark)
    event.aux = writer_->intern_string(name);
  event.stack_id =
      stacks_.intern(native, native_count, python, python_count, event.python_state, event.stack_truncated);
  sequencer_.push(event, [this](const RawEvent& e) { record(e); });
}

void TracedProcess::on_started(uint32_t tid, uint16_t api, uint64_t t_ns) { in_flight_[tid] = {api, t_ns}; }

void TracedProcess::on_module(uint64_t bias, uint64_t start, uint64_t end, std::string path) {
  stacks_.add_module(bias, start, end, std::move(path));
}

void TracedProcess::on_code(uint64_t code, std::string name, std::string file) {
  stacks_.add_code(code, std::move(name), std::move(file));
}

void TracedProcess::on_device(int32_t ordinal, std::string name, uint64_t total_bytes) {
  pb::Device device;
  device.set_ordinal(ordinal);
  device.set_name(std::move(name));
  device.set_total_bytes(total_bytes);
  writer_->add_device(device);
}

size_t TracedProcess::drain() {
  auto emit = [this](const RawEvent& e) { record(e); };
  dropped_.clear();
  ring_.take_dropped(dropped_);
  for (uint64_t seq : dropped_) sequencer_.skip(seq, emit);
  return ring_.drain(*this, ended_);
}

void TracedProcess::mark_ended() {
  if (ended_) return;
  ended_ = true;
  drain();
  sequencer_.flush([this](const RawEvent& e) { record(e); });
  // Calls the process was inside when it died: the device may have done them. They go in the
  // trace as interrupted, so nothing the device counted is missing from it.
  for (const auto& [tid, call] : in_flight_) {
    RawEvent e;
    e.tid = tid;
    e.api = call.first;
    e.kind = static_cast<uint8_t>(api_info(static_cast<Api>(call.first < static_cast<uint16_t>(Api::kCount) ? call.first : 0)).kind);
    e.t_ns = call.second;
    e.result = kInterruptedCall;
    record(e);
  }
  in_flight_.clear();
  if (socket_ >= 0) {
    ::close(socket_);
    socket_ = -1;
  }
}

void TracedProcess::snapshot(pb::Snapshot::Reason reason, uint64_t now_ns) {
  if (finished_) return;
  drain();
  snapshots_.take(reason, now_ns > origin_ns_ ? now_ns - origin_ns_ : 0, replay_);
}

void TracedProcess::finish(std::optional<int> exit_status, const std::string& end_reason, uint64_t end_ns) {
  if (finished_) return;
  mark_ended();
  finished_ = true;
  pb::Footer footer;
  footer.set_end_ns(end_ns > origin_ns_ ? end_ns - origin_ns_ : 0);
  if (exit_status) footer.set_exit_status(*exit_status);
  footer.set_end_reason(end_reason);
  footer.set_dropped_events(ring_.dropped_events());
  footer.set_incomplete_records(ring_.incomplete_records());
  writer_->finish(footer);

  snapshots_.finish(exit_status, replay_);
  summary_.finish(report_);
  report_.pid = pid_;
  report_.trace_path = writer_->path();
  report_.exit_status = exit_status;
  report_.end_reason = end_reason;
  report_.events = writer_->events_written();
  report_.dropped_events = footer.dropped_events();
  report_.incomplete_records = footer.incomplete_records();
  report_.end_time_ns = footer.end_ns();
  report_.complete = !writer_->failed();
  report_.problem = writer_->error();
}

}  // namespace memtrace
