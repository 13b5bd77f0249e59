// Snapshots kept by the collector, driven event by event as a traced process would: the peak is
// the process's peak of reserved memory alone (an allocator's sub-allocations, the allocated
// layer, lie inside it), out-of-memory snapshots learn whether the process recovered, and a
// snapshot holds the live allocations with their stacks.
#include "snapshot_keeper.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "memtrace/format/trace_reader.h"

namespace {

using namespace memtrace;
namespace fs = std::filesystem;
constexpr uint64_t kMiB = 1 << 20;

// A traced process as the collector sees it: its trace (whose stacks snapshots copy), its
// replay, and the keeper.
class Process {
 public:
  explicit Process(const std::string& name, bool at_peak = false) {
    dir_ = fs::temp_directory_path() / ("memtrace-snapshots-" + std::to_string(::getpid()) + "-" + name);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::string error;
    trace_ = TraceWriter::create((dir_ / "42.memtrace").string(), error);
    EXPECT_TRUE(trace_) << error;
    header_.set_pid(42);
    trace_->write_header(header_);
    SnapshotOptions options;
    options.dir = dir_.string();
    options.at_peak = at_peak;
    keeper_ = std::make_unique<SnapshotKeeper>(options, header_, *trace_);
  }
  ~Process() { fs::remove_all(dir_); }

  uint64_t stack(const std::string& function) {
    FrameInfo f;
    f.address = 0x1000 + function.size();
    f.module = "/bin/app";
    f.function = function;
    return trace_->intern_stack({trace_->intern_frame(f)});
  }
  void event(Event e) {
    e.t_ns = ++now_;
    e.kind = api_info(e.api).kind;
    e.layer = api_info(e.api).layer;
    keeper_->before(e, replay_);
    const ReplayStep& step = replay_.apply(e);
    keeper_->on_event(e, step, replay_);
  }
  void alloc(Api api, uint64_t addr, uint64_t size, const std::string& function, int result = 0) {
    Event e;
    e.api = api;
    e.addr = addr;
    e.size = size;
    e.device = 0;
    e.result = result;
    e.heap = api == Api::kNvtxMemRegionRegister ? 0x10000000 : 0;
    e.stack_id = stack(function);
    event(e);
  }
  void free(Api api, uint64_t addr) {
    Event e;
    e.api = api;
    e.addr = addr;
    event(e);
  }
  void demand() { keeper_->take(pb::Snapshot::DEMAND, now_, replay_); }
  void finish(std::optional<int> status) { keeper_->finish(status, replay_); }
  const SnapshotKeeper& keeper() const { return *keeper_; }
  uint64_t now() const { return now_; }

 private:
  fs::path dir_;
  pb::TraceHeader header_;
  std::unique_ptr<TraceWriter> trace_;
  std::unique_ptr<SnapshotKeeper> keeper_;
  Replay replay_;
  uint64_t now_ = 0;
};

struct Read {
  pb::Snapshot info;
  std::vector<Event> events;
  std::unique_ptr<TraceReader> reader;
};

Read read(const std::string& path) {
  Read out;
  std::string error;
  out.reader = TraceReader::open(path, error);
  EXPECT_TRUE(out.reader) << error;
  if (!out.reader) return out;
  Event e;
  while (out.reader->next(e)) out.events.push_back(e);
  EXPECT_TRUE(out.reader->snapshot()) << path;
  if (out.reader->snapshot()) out.info = *out.reader->snapshot();
  return out;
}

std::string function_of(const TraceReader& reader, uint64_t stack_id) {
  const auto* frames = reader.stack(stack_id);
  if (!frames || frames->empty()) return "";
  return std::string(reader.string(reader.frame(frames->front())->function()));
}

TEST(SnapshotKeeper, PeakIsOfReservedMemoryAloneNotOfTheAllocatorsRegionsInsideIt) {
  Process p("peak", /*at_peak=*/true);
  const uint64_t segment = 0x10000000;
  p.alloc(Api::kCudaMalloc, segment, 32 * kMiB, "grow_pool");           // reserved: 32 MiB
  p.alloc(Api::kNvtxMemHeapRegister, segment, 32 * kMiB, "grow_pool");  // the pool's heap
  p.alloc(Api::kNvtxMemRegionRegister, segment, 24 * kMiB, "forward");  // allocated: 24 MiB
  p.free(Api::kNvtxMemRegionUnregister, segment);
  p.alloc(Api::kCudaMalloc, 0x20000000, 8 * kMiB, "load_weights");  // reserved: 40 MiB, the peak
  const uint64_t peak_time = p.now();
  p.free(Api::kCudaFree, 0x20000000);
  p.finish(0);

  ASSERT_EQ(p.keeper().paths().size(), 1u);
  Read s = read(p.keeper().paths()[0]);
  EXPECT_EQ(s.info.reason(), pb::Snapshot::PEAK);
  EXPECT_EQ(s.info.time_ns(), peak_time);
  EXPECT_EQ(s.info.reserved_bytes(), 40 * kMiB);
  EXPECT_EQ(s.info.reserved_count(), 2u);
}

TEST(SnapshotKeeper, OutOfMemoryThenRecoveredIsRewrittenWithItsOutcome) {
  Process p("recovered");
  p.alloc(Api::kCudaMalloc, 0x10000000, 6 * kMiB, "weights");
  p.alloc(Api::kCudaMalloc, 0, 4 * kMiB, "activations", kOutOfMemoryResult);
  ASSERT_EQ(p.keeper().paths().size(), 1u);
  Read before = read(p.keeper().paths()[0]);
  EXPECT_EQ(before.info.reason(), pb::Snapshot::OOM);
  EXPECT_FALSE(before.info.outcome_known());
  ASSERT_TRUE(before.reader->snapshot_request());
  EXPECT_EQ(before.reader->snapshot_request()->size, 4 * kMiB);
  EXPECT_EQ(function_of(*before.reader, before.reader->snapshot_request()->stack_id), "activations");

  p.alloc(Api::kCudaMalloc, 0x20000000, 1 * kMiB, "smaller_batch");  // it went on: it recovered
  Read after = read(p.keeper().paths()[0]);
  EXPECT_TRUE(after.info.outcome_known());
  EXPECT_TRUE(after.info.recovered());
  EXPECT_FALSE(after.info.fatal());
  EXPECT_EQ(after.info.reserved_bytes(), 6 * kMiB);  // what was live at the failure, unchanged
  EXPECT_TRUE(p.keeper().errors().empty());
}

TEST(SnapshotKeeper, OutOfMemoryThenDeathIsFatal) {
  Process p("fatal");
  p.alloc(Api::kCudaMalloc, 0, 4 * kMiB, "activations", kOutOfMemoryResult);
  p.finish(1);
  Read s = read(p.keeper().paths()[0]);
  EXPECT_TRUE(s.info.outcome_known());
  EXPECT_TRUE(s.info.fatal());
  EXPECT_FALSE(s.info.recovered());
}

TEST(SnapshotKeeper, AnOutOfMemorySnapshotHoldsTheNewestEventsBeforeItOldestFirst) {
  Process p("recent");
  // More than the keeper keeps: the oldest ones go; each size says which event it was.
  const uint64_t made = SnapshotKeeper::kRecentEvents + 500;
  for (uint64_t i = 1; i <= made; ++i) {
    p.alloc(Api::kCudaMalloc, 0x10000000, i, "step");
    p.free(Api::kCudaFree, 0x10000000);
  }
  p.alloc(Api::kCudaMalloc, 0, 1 << 30, "activations", kOutOfMemoryResult);
  ASSERT_EQ(p.keeper().paths().size(), 1u);
  Read s = read(p.keeper().paths()[0]);
  ASSERT_TRUE(s.reader->snapshot_request());
  EXPECT_EQ(s.reader->snapshot_request()->size, uint64_t{1} << 30);
  // The request itself is not among them: the 999 events before it, the last free newest.
  const std::vector<Event>& recent = s.reader->recent_events();
  ASSERT_EQ(recent.size(), SnapshotKeeper::kRecentEvents - 1);
  for (size_t i = 0; i < recent.size(); ++i) {
    const size_t from_end = recent.size() - 1 - i;  // 0: the newest, a free
    EXPECT_EQ(recent[i].api, from_end % 2 ? Api::kCudaMalloc : Api::kCudaFree) << i;
    if (recent[i].api == Api::kCudaMalloc) {
      EXPECT_EQ(recent[i].size, made - from_end / 2) << i;
    }
  }
}

TEST(SnapshotKeeper, DemandSnapshotHoldsTheLiveAllocationsWithTheirStacks) {
  Process p("demand");
  p.alloc(Api::kCudaMalloc, 0x10000000, 2 * kMiB, "weights");
  p.alloc(Api::kCudaMalloc, 0x20000000, 3 * kMiB, "optimizer");
  p.alloc(Api::kCudaMalloc, 0x30000000, 5 * kMiB, "activations");
  p.free(Api::kCudaFree, 0x30000000);
  p.demand();
  ASSERT_EQ(p.keeper().paths().size(), 1u);
  Read s = read(p.keeper().paths()[0]);
  EXPECT_EQ(s.info.reason(), pb::Snapshot::DEMAND);
  EXPECT_EQ(s.info.reserved_bytes(), 5 * kMiB);
  ASSERT_EQ(s.events.size(), 2u);
  EXPECT_EQ(s.events[0].size, 2 * kMiB);
  EXPECT_EQ(function_of(*s.reader, s.events[0].stack_id), "weights");
  EXPECT_EQ(function_of(*s.reader, s.events[1].stack_id), "optimizer");
  EXPECT_EQ(s.reader->recent_events().size(), 4u);
}

}  // namespace
