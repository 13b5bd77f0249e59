// Every sample under `memtrace run --sim`: the report's counts per API equal the simulated
// device's ledger, its peaks equal the ledger's and the sample's own, and the exit status is CMD's.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "harness.h"

namespace {

using nlohmann::json;

struct SampleCase {
  std::string name;
  std::vector<std::string> args;
  std::vector<std::string> memtrace_options;
  int exit_status = 0;
  bool exact_peaks = true;  // false where threads race between the call and its record
};

std::ostream& operator<<(std::ostream& os, const SampleCase& c) { return os << c.name; }

class SampleTest : public ::testing::TestWithParam<SampleCase> {};

TEST_P(SampleTest, ReportMatchesLedgerAndSample) {
  const SampleCase& c = GetParam();
  std::string dir = e2e::temp_dir(c.name);
  e2e::Result r = e2e::run_sample(dir, c.name, c.args, c.memtrace_options);
  ASSERT_EQ(r.status, c.exit_status) << r.err;
  e2e::expect_report_matches_ledger(dir, r, c.exact_peaks);
}

// The benchmarks' simulated device hands out addresses without memory (no mmap per allocation):
// what is recorded must be the same.
TEST(UnbackedDevice, RecordsWhatTheBackedOneDoes) {
  std::string dir = e2e::temp_dir("unbacked");
  e2e::Result r = e2e::run_traced(dir, {"/usr/bin/env", "MEMTRACE_SIM_UNBACKED=1", e2e::sample_path("train_loop")});
  ASSERT_EQ(r.status, 0) << r.err;
  e2e::expect_report_matches_ledger(dir, r, true);
  size_t allocations = 0;
  for (const auto& e : e2e::exported_events(dir))
    if (e["op"] == "alloc" && e["result"] == 0) {
      EXPECT_GE(e["addr"].get<uint64_t>(), 0x600000000000ull) << e.dump();  // the unbacked range
      ++allocations;
    }
  EXPECT_GT(allocations, 0u);
}

class PythonSampleTest : public ::testing::TestWithParam<std::string> {};

TEST_P(PythonSampleTest, ReportMatchesLedgerAndSample) {
  std::string dir = e2e::temp_dir(GetParam());
  e2e::Result r = e2e::run_traced(dir, e2e::python_sample(GetParam()));
  ASSERT_EQ(r.status, 0) << r.err;
  ASSERT_FALSE(e2e::sample_accounts(r.out).empty()) << r.out;
  e2e::expect_report_matches_ledger(dir, r, true);
}

INSTANTIATE_TEST_SUITE_P(PythonSamples, PythonSampleTest,
                         ::testing::Values("train_loop.py", "leak.py", "worker_thread.py", "workers.py"),
                         [](const auto& info) { return info.param.substr(0, info.param.find('.')); });

INSTANTIATE_TEST_SUITE_P(
    Samples, SampleTest,
    ::testing::Values(SampleCase{"train_loop", {"--steps", "5"}, {}}, SampleCase{"leak", {"--iterations", "30"}, {}},
                      SampleCase{"oom", {"--chunk-mib", "4096"}, {"--sim-capacity", "20GiB"}, 1},
                      SampleCase{"vmm", {}, {}}, SampleCase{"stream_pool", {}, {}},
                      SampleCase{"multi_device", {}, {"--sim-devices", "3"}}, SampleCase{"driver_api", {}, {}},
                      SampleCase{"runtime_kinds", {}, {}}, SampleCase{"processes", {}, {}},
                      SampleCase{"threads", {"--threads", "8", "--iterations", "3000"}, {}, 0, false}),
    [](const auto& info) { return info.param.name; });

TEST(Report, SitesAtPeakNameTheSamplesCode) {
  std::string dir = e2e::temp_dir("sites");
  ASSERT_EQ(e2e::run_sample(dir, "driver_api").status, 0);
  json report = e2e::report_json(dir + "/traces");
  const json& sites = report["processes"][0]["devices"][0]["top_sites_at_peak"];
  ASSERT_EQ(sites.size(), 3u) << sites.dump(2);
  EXPECT_EQ(sites[0]["api"], "cuMemAlloc");
  EXPECT_EQ(sites[0]["bytes"], 48 << 20);
  EXPECT_EQ(sites[1]["api"], "cuMemAllocManaged");
  for (const json& s : sites) {
    EXPECT_EQ(std::filesystem::path(s["stack"][0]["module"].get<std::string>()).filename(), "driver_api") << s.dump();
    EXPECT_EQ(s["location"].get<std::string>().rfind("main at driver_api.cpp:", 0), 0u) << s.dump();
  }
}

// Forked and spawned Python workers: one trace each, each matching its own ledger (above), and
// the interpreter's helper processes that never touch CUDA leave none.
TEST(Processes, PythonWorkersForkedAndSpawned) {
  std::string dir = e2e::temp_dir("workers");
  e2e::Result r = e2e::run_traced(dir, e2e::python_sample("workers.py"));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(e2e::sample_accounts(r.out).size(), 5u) << r.out;
  json report = e2e::report_json(dir + "/traces");
  EXPECT_EQ(report["processes"].size(), 5u);
  EXPECT_EQ(e2e::read_ledgers(dir).size(), 5u);
}

// The load of the fault matrix: 16 threads, each 100,000 allocations and frees with stacks,
// mixing runtime, driver, VMM and stream-ordered calls: every event there, every free matched.
TEST(Load, SixteenThreadsOfAHundredThousand) {
  std::string dir = e2e::temp_dir("load");
  e2e::Result r = e2e::run_sample(dir, "threads", {"--threads", "16", "--iterations", "100000"});
  ASSERT_EQ(r.status, 0) << r.err;
  e2e::expect_report_matches_ledger(dir, r, false);
  json p = e2e::report_json(dir + "/traces")["processes"][0];
  EXPECT_EQ(p["unmatched_frees"], 0);
  EXPECT_EQ(p["dropped_events"], 0);
  EXPECT_GT(p["events_total"].get<uint64_t>(), 3'000'000u);
}

TEST(Processes, ShellPipeline) {
  std::string dir = e2e::temp_dir("pipeline");
  std::string line = e2e::sample_path("leak") + " --iterations 4 | " + e2e::sample_path("train_loop") + " --steps 2";
  e2e::Result r = e2e::run_traced(dir, {"/bin/sh", "-c", line});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(e2e::read_ledgers(dir).size(), 2u);  // the shell touches no CUDA: no trace of it
  e2e::expect_report_matches_ledger(dir, r, true);
}

TEST(Processes, DaemonizedGrandchildIsWaitedForAndTraced) {
  std::string dir = e2e::temp_dir("daemon");
  e2e::Result r = e2e::run_sample(dir, "daemon");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(e2e::sample_accounts(r.out).size(), 2u) << r.out;
  EXPECT_EQ(e2e::read_ledgers(dir).size(), 2u);
  e2e::expect_report_matches_ledger(dir, r, true);
}

TEST(Report, NamesTheDevices) {
  std::string dir = e2e::temp_dir("devices");
  ASSERT_EQ(e2e::run_sample(dir, "multi_device", {}, {"--sim-devices", "2", "--sim-capacity", "24GiB"}).status, 0);
  json report = e2e::report_json(dir + "/traces");
  const json& devices = report["processes"][0]["devices"];
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices[1]["name"], "memtrace simulated GPU 1");
  EXPECT_EQ(devices[1]["total_bytes"], 24ull << 30);
}

TEST(Report, LeakIsLiveAtExit) {
  std::string dir = e2e::temp_dir("leak");
  ASSERT_EQ(e2e::run_sample(dir, "leak", {"--iterations", "12"}).status, 0);
  json p = e2e::report_json(dir + "/traces")["processes"][0];
  EXPECT_EQ(p["devices"][0]["live_at_exit_bytes"], 12 * (64 << 10));
  EXPECT_EQ(p["devices"][0]["live_at_exit_count"], 12);
  EXPECT_EQ(p["exit_status"], 0);
  EXPECT_EQ(p["end_reason"], "exited");

  e2e::Result text = e2e::run({e2e::kMemtrace, "report", dir + "/traces"});
  EXPECT_EQ(text.status, 0);
  EXPECT_NE(text.out.find("live at exit 768 KiB in 12 allocations"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find(" at leak.cpp:"), std::string::npos) << text.out;
}

TEST(Export, JsonlHasEveryEventInTimeOrder) {
  std::string dir = e2e::temp_dir("export");
  ASSERT_EQ(e2e::run_sample(dir, "processes").status, 0);
  e2e::Result r =
      e2e::run({e2e::kMemtrace, "export", "--format", "jsonl", "-o", dir + "/events.jsonl", dir + "/traces"});
  ASSERT_EQ(r.status, 0) << r.err;

  uint64_t ledger_calls = 0;
  for (const auto& [pid, ledger] : e2e::read_ledgers(dir))
    for (const auto& [api, counts] : ledger.apis) ledger_calls += counts.calls;

  std::ifstream in(dir + "/events.jsonl");
  std::string line;
  uint64_t lines = 0, last_t = 0;
  std::map<uint64_t, json> live;
  while (std::getline(in, line)) {
    json e = json::parse(line);
    if (e2e::is_device_sample(e)) continue;  // not calls
    ++lines;
    for (const char* field : {"t_ns", "pid", "tid", "api", "kind", "device", "stream", "addr", "size", "result"})
      ASSERT_TRUE(e.contains(field)) << field << " missing in " << line;
    EXPECT_GE(e["t_ns"].get<uint64_t>(), last_t) << "out of time order: " << line;
    last_t = e["t_ns"];
    EXPECT_EQ(e["kind"], "device");
    if (e["api"] == "cudaFree") {
      EXPECT_GT(e["size"].get<uint64_t>(), 0u) << "a free knows what it freed: " << line;
    }
  }
  EXPECT_EQ(lines, ledger_calls);

  // A rerun replaces the export, as every report file is (first_hour_test: never a trace).
  r = e2e::run({e2e::kMemtrace, "export", "--format", "jsonl", "-o", dir + "/events.jsonl", dir + "/traces"});
  EXPECT_EQ(r.status, 0) << r.err;
  std::ifstream again(dir + "/events.jsonl");
  uint64_t lines_again = 0;
  while (std::getline(again, line)) lines_again += !e2e::is_device_sample(json::parse(line));
  EXPECT_EQ(lines_again, ledger_calls);
}

}  // namespace
