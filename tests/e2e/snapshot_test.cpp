// Snapshots: on out-of-memory (the process dies, recovers, or is killed right after), on
// demand, periodically and at the peak. Each is compared with the ledger and with what the
// sample knew at that moment.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <thread>

#include "harness.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json snapshot(const std::string& path) {
  e2e::Result r = e2e::run({e2e::kMemtrace, "snapshot", "--json", path});
  EXPECT_EQ(r.status, 0) << r.err;
  return r.status == 0 ? json::parse(r.out) : json();
}

std::vector<std::string> snapshots(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> found;
  for (const auto& e : fs::directory_iterator(dir + "/traces"))
    if (e.path().filename().string().rfind(prefix, 0) == 0 && e.path().extension() == ".memsnap")
      found.push_back(e.path().string());
  std::sort(found.begin(), found.end());
  return found;
}

// What the oom sample printed at each failure.
std::vector<json> failures(const std::string& out) {
  std::vector<json> seen;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("memtrace-sample-oom: ", 0) == 0) seen.push_back(json::parse(line.substr(21)));
  return seen;
}

void expect_oom_snapshot(const json& s, const json& known) {
  EXPECT_EQ(s["reason"], "oom");
  EXPECT_EQ(s["device"], 0);
  EXPECT_EQ(s["live_bytes"], known["live_bytes"]);
  EXPECT_EQ(s["device_free_bytes"], known["free_bytes"]);
  EXPECT_EQ(s["device_total_bytes"], known["total_bytes"]);
  EXPECT_EQ(s["request"]["api"], "cudaMalloc");
  EXPECT_EQ(s["request"]["size"], 1ull << 30);
  const json& top = s["request"]["stack"][0];
  EXPECT_EQ(top["line"], e2e::marked_line(std::string(MEMTRACE_SAMPLES_SOURCE) + "/oom.cpp", "oom")) << top;
  ASSERT_EQ(s["sites"].size(), 1u);
  EXPECT_EQ(s["sites"][0]["bytes"], known["live_bytes"]);
  EXPECT_GT(s["recent_events"].get<int>(), 0);
  EXPECT_NE(s["diagnosis"].get<std::string>().find("device 0 ran out of memory: asked for 1.00 GiB"), std::string::npos)
      << s["diagnosis"];
}

TEST(Snapshots, OutOfMemoryAndDies) {
  std::string dir = e2e::temp_dir("oom");
  e2e::Result r = e2e::run_sample(dir, "oom", {}, {"--sim-capacity", "8GiB"});
  ASSERT_EQ(r.status, 1) << r.err;
  std::vector<json> known = failures(r.out);
  ASSERT_EQ(known.size(), 1u);
  auto files = snapshots(dir, "oom-");
  ASSERT_EQ(files.size(), 1u);
  json s = snapshot(files[0]);
  expect_oom_snapshot(s, known[0]);
  EXPECT_EQ(s["fatal"], true);
  EXPECT_EQ(s["outcome_known"], true);
  auto ledgers = e2e::read_ledgers(dir);
  EXPECT_EQ(s["live_bytes"].get<uint64_t>(), ledgers.begin()->second.live.at(0));

  json p = e2e::report_json(dir + "/traces")["processes"][0];
  ASSERT_EQ(p["oom_events"].size(), 1u);
  EXPECT_EQ(p["oom_events"][0]["size"], 1ull << 30);
  ASSERT_EQ(p["snapshots"].size(), 1u);
  EXPECT_EQ(p["snapshots"][0], files[0]);
}

TEST(Snapshots, RecoversThenDiesLater) {
  std::string dir = e2e::temp_dir("recover");
  e2e::Result r = e2e::run_sample(dir, "oom", {"--recover"}, {"--sim-capacity", "8GiB"});
  ASSERT_EQ(r.status, 1) << r.err;
  std::vector<json> known = failures(r.out);
  auto files = snapshots(dir, "oom-");
  ASSERT_EQ(files.size(), 2u);
  ASSERT_EQ(known.size(), 2u);
  json first = snapshot(files[0]), second = snapshot(files[1]);
  expect_oom_snapshot(first, known[0]);
  expect_oom_snapshot(second, known[1]);
  EXPECT_EQ(first["recovered"], true);
  EXPECT_EQ(first["fatal"], false);
  EXPECT_EQ(second["fatal"], true);
  EXPECT_GT(second["time_ns"].get<uint64_t>(), first["time_ns"].get<uint64_t>());
}

TEST(Snapshots, KilledRightAfterTheFailure) {
  std::string dir = e2e::temp_dir("killed");
  e2e::Result r = e2e::run_sample(dir, "oom", {"--kill-after-oom"}, {"--sim-capacity", "8GiB"});
  ASSERT_EQ(r.status, 128 + SIGKILL) << r.err;
  auto files = snapshots(dir, "oom-");
  ASSERT_EQ(files.size(), 1u);
  json s = snapshot(files[0]);
  auto ledger = e2e::read_ledgers(dir).begin()->second;
  EXPECT_EQ(s["live_bytes"].get<uint64_t>(), ledger.live.at(0));
  // The simulated device: capacity, less its context (300 MiB), less what the program held.
  EXPECT_EQ(s["device_free_bytes"].get<uint64_t>(), (8ull << 30) - (300ull << 20) - ledger.live.at(0));
  EXPECT_EQ(s["fatal"], true);
}

TEST(Snapshots, AtMostAsManyAsAsked) {
  std::string dir = e2e::temp_dir("max");
  ASSERT_EQ(e2e::run_sample(dir, "oom", {"--recover"}, {"--sim-capacity", "8GiB", "--max-oom-snapshots", "1"}).status,
            1);
  EXPECT_EQ(snapshots(dir, "oom-").size(), 1u);
}

TEST(Snapshots, OnDemandWhileRunning) {
  std::string dir = e2e::temp_dir("demand");
  fs::create_directories(dir);
  pid_t pid = ::fork();
  if (pid == 0) {
    if (!freopen((dir + "/log").c_str(), "w", stderr) || !freopen((dir + "/out").c_str(), "w", stdout)) _exit(126);
    ::execl(e2e::kMemtrace.c_str(), e2e::kMemtrace.c_str(), "run", "--sim", "-o", (dir + "/traces").c_str(), "--",
            e2e::sample_path("hold").c_str(), "--until", (dir + "/stop").c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  // Each step waits for what it needs: the buffers held, then the snapshot written. The two
  // minutes are only there so that a broken build fails instead of hanging.
  auto wait_until = [](auto&& done) {
    for (auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
         !done() && std::chrono::steady_clock::now() < deadline;)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return done();
  };
  auto holding = [&] {
    std::ifstream log(dir + "/log");
    std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    return text.find("hold: holding") != std::string::npos;
  };
  EXPECT_TRUE(wait_until(holding));
  ::kill(pid, SIGUSR1);
  EXPECT_TRUE(wait_until([&] { return snapshots(dir, "demand-").size() == 1; }));
  std::ofstream(dir + "/stop").put('\n');
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  auto files = snapshots(dir, "demand-");
  ASSERT_EQ(files.size(), 1u);
  json s = snapshot(files[0]);
  EXPECT_EQ(s["reason"], "demand");
  EXPECT_EQ(s["request"], nullptr);
  EXPECT_EQ(s["live_bytes"], 5 * (3 << 20));
  EXPECT_EQ(s["live_count"], 5);
}

TEST(Snapshots, PeriodicWhileRunning) {
  std::string dir = e2e::temp_dir("periodic");
  ASSERT_EQ(e2e::run_sample(dir, "hold", {"--hold-ms", "1200"}, {"--snapshot-every", "0.3s"}).status, 0);
  auto files = snapshots(dir, "periodic-");
  ASSERT_GE(files.size(), 2u);
  bool held = false;  // one of them fell while the sample held its five buffers
  for (const auto& file : files) {
    json s = snapshot(file);
    EXPECT_EQ(s["reason"], "periodic");
    held |= s["live_bytes"] == 5 * (3 << 20);
  }
  EXPECT_TRUE(held);

  e2e::Result bad = e2e::run({e2e::kMemtrace, "run", "--snapshot-every", "soon", "--", "/bin/true"});
  EXPECT_NE(bad.status, 0);
}

TEST(Snapshots, AtThePeak) {
  std::string dir = e2e::temp_dir("peak");
  ASSERT_EQ(e2e::run_sample(dir, "train_loop", {"--steps", "4"}, {"--snapshot-at-peak"}).status, 0);
  auto files = snapshots(dir, "peak-");
  ASSERT_EQ(files.size(), 1u);
  json s = snapshot(files[0]);
  json p = e2e::report_json(dir + "/traces")["processes"][0];
  EXPECT_EQ(s["reason"], "peak");
  EXPECT_EQ(s["live_bytes"], p["devices"][0]["peak_reserved_bytes"]);
  EXPECT_EQ(s["time_ns"], p["devices"][0]["peak_time_ns"]);
}

TEST(Snapshots, CommandRefusesWhatIsNotASnapshot) {
  std::string dir = e2e::temp_dir("notsnap");
  ASSERT_EQ(e2e::run_sample(dir, "leak", {"--iterations", "2"}).status, 0);
  fs::path trace = fs::directory_iterator(dir + "/traces")->path();
  e2e::Result r = e2e::run({e2e::kMemtrace, "snapshot", trace.string()});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("not a snapshot"), std::string::npos) << r.err;
  e2e::Result none = e2e::run({e2e::kMemtrace, "snapshot", dir + "/traces"});
  EXPECT_EQ(none.status, 2);
  EXPECT_NE(none.err.find("no .memsnap"), std::string::npos) << none.err;
}

}  // namespace
