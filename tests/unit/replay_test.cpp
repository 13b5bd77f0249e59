// The replay and the report built on it, on hand-made event sequences with known answers.
#include "memtrace/engine/replay.h"

#include <gtest/gtest.h>

#include <climits>
#include <random>
#include <unordered_map>

#include "memtrace/base/address_map.h"
#include "memtrace/engine/report.h"

namespace {

using namespace memtrace;

Event alloc(Api api, uint64_t addr, uint64_t size, uint64_t t, uint64_t stack = 1, int device = 0, int result = 0) {
  Event e;
  e.api = api;
  e.kind = api_info(api).kind;
  e.addr = addr;
  e.size = size;
  e.t_ns = t;
  e.stack_id = stack;
  e.device = device;
  e.result = result;
  return e;
}

Event release(Api api, uint64_t addr, uint64_t t, uint64_t size = 0) {
  Event e;
  e.api = api;
  e.kind = api_info(api).kind;
  e.addr = addr;
  e.size = size;
  e.t_ns = t;
  return e;
}

ProcessReport replay_all(const std::vector<Event>& events, size_t top_sites = 10) {
  Replay replay;
  ReportBuilder builder(top_sites);
  for (const Event& e : events) builder.add(replay.apply(e));
  ProcessReport report;
  builder.finish(report);
  return report;
}

// cudaMalloc(&p, 0) succeeds: an allocation of no bytes is an allocation, not a free (counted as
// one, 61,000 of them left "18446744073709429617 allocations" live at exit).
TEST(Replay, ZeroByteAllocationsAreAllocations) {
  ProcessReport r = replay_all({
      alloc(Api::kCudaMalloc, 0x1000, 0, 1, 1),
      alloc(Api::kCudaMalloc, 0x2000, 0, 2, 1),
      alloc(Api::kCudaMalloc, 0x3000, 100, 3, 2),
      release(Api::kCudaFree, 0x1000, 4),
  });
  ASSERT_EQ(r.devices.size(), 1u);
  const DeviceReport& d = r.devices[0];
  EXPECT_EQ(d.live_at_exit_bytes, 100u);
  EXPECT_EQ(d.live_at_exit_count, 2u);
  EXPECT_EQ(d.peak_bytes, 100u);
}

// The collector's summary keeps no sites (ReportBuilder with 0 of them): its peaks, live counts
// and calls are those of a builder that does.
TEST(Replay, ABuilderWithoutSitesCountsAsOneWithThem) {
  std::vector<Event> events;
  uint64_t t = 0;
  for (uint64_t i = 0; i < 200; ++i) {
    events.push_back(alloc(Api::kCudaMalloc, 0x100000 + i * 0x1000, 100 + i % 7 * 50, ++t, 1 + i % 5));
    if (i % 3 == 0) events.push_back(release(Api::kCudaFree, 0x100000 + (i / 2) * 0x1000, ++t));
  }
  events.push_back(alloc(Api::kCudaMalloc, 0, 1 << 30, ++t, 2, 0, kOutOfMemoryResult));
  const ProcessReport with = replay_all(events), without = replay_all(events, 0);
  ASSERT_EQ(with.devices.size(), 1u);
  ASSERT_EQ(without.devices.size(), 1u);
  const DeviceReport &a = with.devices[0], &b = without.devices[0];
  EXPECT_EQ(a.peak_bytes, b.peak_bytes);
  EXPECT_EQ(a.peak_time_ns, b.peak_time_ns);
  EXPECT_EQ(a.live_at_exit_bytes, b.live_at_exit_bytes);
  EXPECT_EQ(a.live_at_exit_count, b.live_at_exit_count);
  EXPECT_FALSE(a.peak_sites.empty());
  EXPECT_TRUE(b.peak_sites.empty());
  EXPECT_TRUE(b.exit_sites.empty());
  EXPECT_EQ(with.calls.at(Api::kCudaMalloc).calls, without.calls.at(Api::kCudaMalloc).calls);
  EXPECT_EQ(without.calls.at(Api::kCudaMalloc).failed, 1u);
  EXPECT_EQ(with.oom_events.size(), without.oom_events.size());
}

TEST(Replay, PeakAndSitesAtThePeak) {
  ProcessReport r = replay_all({
      alloc(Api::kCudaMalloc, 0x1000, 100, 1, /*stack=*/1),
      alloc(Api::kCudaMalloc, 0x2000, 300, 2, 2),
      release(Api::kCudaFree, 0x1000, 3),
      alloc(Api::kCudaMalloc, 0x3000, 500, 4, 3),  // peak: 300 + 500 at t=4
      release(Api::kCudaFree, 0x3000, 5),
      alloc(Api::kCudaMalloc, 0x4000, 200, 6, 1),
  });
  ASSERT_EQ(r.devices.size(), 1u);
  const DeviceReport& d = r.devices[0];
  EXPECT_EQ(d.peak_bytes, 800u);
  EXPECT_EQ(d.peak_time_ns, 4u);
  EXPECT_EQ(d.live_at_exit_bytes, 500u);
  EXPECT_EQ(d.live_at_exit_count, 2u);
  ASSERT_EQ(d.peak_sites.size(), 2u);
  EXPECT_EQ(d.peak_sites[0].site.stack_id, 3u);
  EXPECT_EQ(d.peak_sites[0].bytes, 500u);
  EXPECT_EQ(d.peak_sites[1].site.stack_id, 2u);
  EXPECT_EQ(r.calls.at(Api::kCudaMalloc).calls, 4u);
  EXPECT_EQ(r.calls.at(Api::kCudaFree).calls, 2u);
}

TEST(Replay, AnyDeviceNumberATraceNamesIsADevice) {
  // The replay and the report keep the last device's figures at hand: a device numbered as their
  // "none yet" (INT32_MIN) must still be counted, not taken for it.
  for (int first : {INT32_MIN, 0}) {
    ProcessReport r = replay_all({
        alloc(Api::kCudaMalloc, 0x1000, 100, 1, 1, first),
        alloc(Api::kCudaMalloc, 0x2000, 300, 2, 2, first == 0 ? INT32_MIN : 0),
        release(Api::kCudaFree, 0x1000, 3),
    });
    ASSERT_EQ(r.devices.size(), 2u);
    EXPECT_EQ(r.devices[0].device, INT32_MIN);
    EXPECT_EQ(r.devices[0].peak_bytes, first == INT32_MIN ? 100u : 300u);
    EXPECT_EQ(r.devices[1].peak_bytes, first == INT32_MIN ? 300u : 100u);
  }
}

TEST(Replay, FailedCallsCountButChangeNothing) {
  ProcessReport r = replay_all({
      alloc(Api::kCudaMalloc, 0x1000, 100, 1), alloc(Api::kCudaMalloc, 0, 1 << 30, 2, 1, 0, /*result=*/2),
      release(Api::kCudaFree, 0x9999, 3),  // never allocated
  });
  EXPECT_EQ(r.calls.at(Api::kCudaMalloc).failed, 1u);
  EXPECT_EQ(r.devices[0].peak_bytes, 100u);
  EXPECT_EQ(r.unmatched_frees, 1u);
}

TEST(Replay, DevicesAndHostMemoryAreKeptApart) {
  ProcessReport r = replay_all({
      alloc(Api::kCudaMalloc, 0x1000, 100, 1, 1, 0),
      alloc(Api::kCudaMalloc, 0x2000, 700, 2, 1, 1),
      alloc(Api::kCudaMallocHost, 0x3000, 5000, 3, 1, -1),
      alloc(Api::kCudaMallocManaged, 0x4000, 50, 4, 1, 0),
  });
  ASSERT_EQ(r.devices.size(), 2u);
  EXPECT_EQ(r.devices[0].peak_bytes, 150u);
  EXPECT_EQ(r.devices[1].peak_bytes, 700u);
  EXPECT_EQ(r.pinned_host_peak_bytes, 5000u);
}

// Physical memory behind a VMM handle stays until it is both released and unmapped.
TEST(Replay, VmmHandleLivesUntilReleasedAndUnmapped) {
  Event map = alloc(Api::kCuMemMap, 0x200000, 2 << 20, 3, 1, -1);
  map.handle = 7;
  Replay replay;
  ReportBuilder builder;
  std::vector<Event> events = {alloc(Api::kCuMemAddressReserve, 0x200000, 8 << 20, 1, 1, -1),
                               alloc(Api::kCuMemCreate, 7, 2 << 20, 2, 1, 0),
                               map,
                               release(Api::kCuMemRelease, 7, 4),
                               release(Api::kCuMemUnmap, 0x200000, 5, 2 << 20),
                               release(Api::kCuMemAddressFree, 0x200000, 6, 8 << 20)};
  std::vector<uint64_t> live;
  for (const Event& e : events) {
    const ReplayStep& step = replay.apply(e);
    builder.add(step);
    live.push_back(replay.device_bytes().count(0) ? replay.device_bytes().at(0) : 0);
  }
  EXPECT_EQ(live, (std::vector<uint64_t>{0, 2 << 20, 2 << 20, 2 << 20, 0, 0}));
  EXPECT_EQ(replay.live_count(), 0u);
  EXPECT_EQ(replay.unmatched_frees(), 0u);
}

TEST(Replay, FreeLearnsWhatItFreed) {
  Replay replay;
  replay.apply(alloc(Api::kCudaMallocManaged, 0x1000, 4096, 1, 1, 2));
  Event f = release(Api::kCudaFree, 0x1000, 2);
  const ReplayStep& step = replay.apply(f);
  EXPECT_TRUE(step.matched);
  EXPECT_EQ(step.kind, MemKind::kManaged);
  EXPECT_EQ(step.device, 2);
  EXPECT_EQ(step.size, 4096u);
  ASSERT_EQ(step.memory_changes.size(), 1u);
  EXPECT_EQ(step.memory_changes[0].bytes, -4096);
}

}  // namespace

// The live set's map against std::unordered_map, over a million random inserts, lookups and
// erases on clustered keys (deletion's backward shift is where open addressing goes wrong).
TEST(AddressMap, AgreesWithTheStandardMap) {
  memtrace::AddressMap<uint64_t> map;
  std::unordered_map<uint64_t, uint64_t> reference;
  std::mt19937_64 rng(7);
  for (int i = 0; i < 1'000'000; ++i) {
    uint64_t key = (rng() % 4096) * 512;  // few, aligned keys: many collisions
    switch (rng() % 3) {
      case 0: {
        auto [value, fresh] = map.try_emplace(key, i);
        auto [it, ref_fresh] = reference.try_emplace(key, i);
        ASSERT_EQ(fresh, ref_fresh);
        ASSERT_EQ(*value, it->second);
        break;
      }
      case 1: ASSERT_EQ(map.erase(key), reference.erase(key) == 1); break;
      default: {
        const uint64_t* value = map.find(key);
        auto it = reference.find(key);
        ASSERT_EQ(value != nullptr, it != reference.end());
        if (value) {
          ASSERT_EQ(*value, it->second);
        }
      }
    }
    ASSERT_EQ(map.size(), reference.size());
  }
  size_t seen = 0;
  map.for_each([&](uint64_t key, uint64_t value) {
    ++seen;
    EXPECT_EQ(reference.at(key), value);
  });
  EXPECT_EQ(seen, reference.size());
}
