#include "snapshot_keeper.h"

#include <algorithm>

#include "memtrace/format/run_folder.h"

namespace memtrace {

std::string SnapshotKeeper::name(const char* kind, uint32_t n) const {
  return run_folder::snapshot_name(options_.dir, kind, header_.pid(), n);
}

SnapshotKeeper::Live SnapshotKeeper::live_now(const Replay& replay) {
  Live live;
  live.reserve(replay.live_count() + replay.regions().size());
  replay.for_each_live([&](uint64_t addr, const LiveAllocation& a) { live.emplace_back(addr, a); });
  for (const auto& [addr, region] : replay.regions()) live.emplace_back(addr, region);  // the allocated layer
  return live;
}

void SnapshotKeeper::before(const Event& event, const Replay& replay) {
  // The first free after a new peak: what is live is still what was live at the peak, since
  // nothing was allocated after it without making a higher one. Copied only then.
  if (options_.at_peak && peak_unsaved_ && event.op() == Op::kFree && event.ok()) {
    at_peak_ = live_now(replay);
    peak_unsaved_ = false;
  }
}

void SnapshotKeeper::on_event(const Event& event, const ReplayStep&, const Replay& replay) {
  if (recent_.size() < kRecentEvents)
    recent_.push_back(event);
  else
    recent_[recent_next_] = event;
  recent_next_ = (recent_next_ + 1) % kRecentEvents;

  // The process's peak of reserved memory, all devices together (the allocated layer lies
  // inside it and is no part of it).
  if (replay.reserved_bytes() > peak_bytes_) {
    peak_bytes_ = replay.reserved_bytes();
    peak_time_ = event.t_ns;
    peak_unsaved_ = true;
  }

  if (from_pytorch(event.api)) torch_allocator_ = true;
  if (event.op() != Op::kAlloc) return;
  if (event.ok()) {
    if (!pending_.empty()) settle(false);  // it went on allocating: it recovered
    return;
  }
  if (event.result != kOutOfMemoryResult || oom_count_ >= static_cast<uint32_t>(options_.max_oom)) return;
  if (torch_allocator_ && event.layer != Layer::kAllocated) return;
  pb::Snapshot info;
  info.set_reason(pb::Snapshot::OOM);
  info.set_time_ns(event.t_ns);
  info.set_sequence(++oom_count_);
  info.set_device(event.device);
  info.set_device_free_bytes(event.device_free);
  info.set_device_total_bytes(event.device_total);
  if (auto written = write(name("oom", oom_count_), info, live_now(replay), event)) pending_.push_back(*written);
}

void SnapshotKeeper::take(pb::Snapshot::Reason reason, uint64_t now_ns, const Replay& replay) {
  pb::Snapshot info;
  info.set_reason(reason);
  info.set_time_ns(now_ns);
  info.set_device(-1);
  uint32_t n = reason == pb::Snapshot::DEMAND ? ++demand_count_ : ++periodic_count_;
  info.set_sequence(n);
  write(name(reason == pb::Snapshot::DEMAND ? "demand" : "periodic", n), info, live_now(replay), std::nullopt);
}

void SnapshotKeeper::finish(std::optional<int> exit_status, const Replay& replay) {
  // Still unsettled: nothing was allocated after the failure. Unless the process exited
  // cleanly, the last failure is what it died of.
  if (!pending_.empty()) settle(!(exit_status && *exit_status == 0));
  if (options_.at_peak && peak_bytes_ > 0) {
    pb::Snapshot info;
    info.set_reason(pb::Snapshot::PEAK);
    info.set_time_ns(peak_time_);
    info.set_device(-1);
    write(name("peak", 0), info, peak_unsaved_ ? live_now(replay) : std::move(at_peak_), std::nullopt);
  }
}

std::optional<SnapshotKeeper::Pending> SnapshotKeeper::write(const std::string& path, pb::Snapshot info, Live live,
                                                             const std::optional<Event>& request) {
  std::string error;
  auto writer = TraceWriter::create(path, error, options_.compression, options_.file_mode);
  if (!writer) {
    errors_.push_back(error);
    return std::nullopt;
  }
  writer->write_header(header_);

  auto imported = [&](Event e) {
    e.stack_id = writer->import_stack(trace_, e.stack_id);
    return e;
  };
  if (request) TraceWriter::encode_events({imported(*request)}, *info.mutable_request());
  // Oldest first: once the ring is full, its oldest is where the next event would go.
  std::vector<Event> recent;
  const size_t recent_count = recent_.size() - (request && !recent_.empty() ? 1 : 0);  // not the request again
  for (size_t i = 0; i < recent_count; ++i)
    recent.push_back(imported(recent_[(recent_.size() < kRecentEvents ? i : recent_next_ + i) % kRecentEvents]));
  TraceWriter::encode_events(recent, *info.mutable_recent());

  // The live allocations, oldest first, as the events that made them: their stacks taken into the
  // snapshot's tables (which go before the Snapshot chunk), then written one by one (a million
  // live allocations: no copy of them all as events).
  std::sort(live.begin(), live.end(), [](const auto& x, const auto& y) { return x.second.t_ns < y.second.t_ns; });
  uint64_t bytes = 0, count = 0, allocated = 0;
  bool allocated_known = false;
  for (auto& [addr, a] : live) {
    a.stack_id = writer->import_stack(trace_, a.stack_id);
    bool on_device = info.device() < 0 || a.device == info.device();
    if (api_info(a.api).layer == Layer::kAllocated) {
      allocated_known = true;
      if (on_device) allocated += a.size;
    } else if (counts_as_device_memory(a.kind) && on_device) {
      bytes += a.size;
      ++count;
    }
  }
  if (allocated_known || torch_allocator_) {
    info.set_allocated_known(true);
    info.set_allocated_bytes(allocated);
  }
  info.set_reserved_bytes(bytes);
  info.set_reserved_count(count);
  writer->write_snapshot(info);
  for (const auto& [addr, a] : live) writer->add(a.as_event(addr));
  pb::Footer footer;
  footer.set_end_ns(info.time_ns());
  footer.set_end_reason("snapshot");
  writer->finish(footer);
  if (writer->failed()) {
    errors_.push_back(writer->error());
    return std::nullopt;
  }
  paths_.push_back(path);
  return Pending{path, info, writer->snapshot_offset(), writer->snapshot_size()};
}

// Rewrites each pending OOM snapshot's Snapshot chunk with its outcome.
void SnapshotKeeper::settle(bool last_fatal) {
  for (size_t i = 0; i < pending_.size(); ++i) {
    Pending& p = pending_[i];
    p.info.set_outcome_known(true);
    p.info.set_fatal(last_fatal && i + 1 == pending_.size());
    p.info.set_recovered(!last_fatal);
    pb::Chunk chunk;
    *chunk.mutable_snapshot() = p.info;
    std::string error;
    if (!TraceWriter::replace_chunk(p.path, p.offset, p.size, chunk, options_.compression, options_.file_mode, error))
      errors_.push_back(error);
  }
  pending_.clear();
}

}  // namespace memtrace
