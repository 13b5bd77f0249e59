// What a new user trips over in the first hour, with the commands they typed: units, limits that
// cannot be measured, runs that add to old ones, sites that read alike, exit codes, the time
// added at exit, timelines, reruns in CI, help, estimate's assumptions and wording.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "harness.h"

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The training-loop sample, traced once for the tests that only read it.
class TrainLoop : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(e2e::temp_dir("train-loop"));
    e2e::Result r = e2e::run_sample(*dir_, "train_loop");
    ASSERT_EQ(r.status, 0) << r.err;
    peak_ = e2e::command_json({e2e::kMemtrace, "peak", "--json", traces()})["processes"][0]["devices"][0]["peak_bytes"];
  }
  static std::string traces() { return *dir_ + "/traces"; }
  static std::string* dir_;
  static uint64_t peak_;
};
std::string* TrainLoop::dir_ = nullptr;
uint64_t TrainLoop::peak_ = 0;

// 1. GB is 10^9 bytes, GiB 2^30, in any case.
TEST_F(TrainLoop, DecimalUnitsArePowersOfTen) {
  ASSERT_GT(peak_, 0u);
  // Just above and just below the peak, in decimal megabytes: read as MiB, both would pass.
  const std::string above = std::to_string(peak_ / 1000 + 1) + "kB", below = std::to_string(peak_ / 1000) + "KB";
  EXPECT_EQ(e2e::run({e2e::kMemtrace, "check", traces(), "--max-peak", above}).status, 0);
  e2e::Result failed = e2e::run({e2e::kMemtrace, "check", traces(), "--max-peak", below});
  EXPECT_EQ(failed.status, 1) << failed.out;
  EXPECT_EQ(e2e::run({e2e::kMemtrace, "check", traces(), "--max-peak", "1gb"}).status, 0);
  EXPECT_EQ(e2e::run({e2e::kMemtrace, "check", traces(), "--max-peak", "0.5GB"}).status, 1);

  const std::string dir = e2e::temp_dir("decimal-capacity");
  ASSERT_EQ(e2e::run_sample(dir, "hold", {"--buffers", "1", "--hold-ms", "0"}, {"--sim-capacity", "2GB"}).status, 0);
  EXPECT_EQ(e2e::report_json(dir + "/traces")["processes"][0]["devices"][0]["total_bytes"], 2000000000u);
}

// Input outside what the run has is refused with what it has (issue 31, item 6), and a capacity
// without a unit is warned about.
TEST(OutOfRange, RefusedWithTheRangeThereIs) {
  const std::string dir = e2e::temp_dir("out-of-range");
  e2e::Result warned = e2e::run({e2e::kMemtrace, "run", "--sim", "--sim-capacity", "24GiB", "-o", dir + "/traces", "--",
                                 e2e::sample_path("train_loop"), "--steps", "4"});
  ASSERT_EQ(warned.status, 0) << warned.err;
  EXPECT_FALSE(contains(warned.err, "warning")) << warned.err;
  e2e::Result tiny = e2e::run({e2e::kMemtrace, "run", "--sim", "--sim-capacity", "24", "-o", dir + "/tiny", "--",
                               e2e::sample_path("train_loop"), "--steps", "1"});
  EXPECT_TRUE(contains(tiny.err, "memtrace run: warning: --sim-capacity 24 is 24 bytes per device")) << tiny.err;

  const std::string traces = dir + "/traces";
  e2e::Result late = e2e::run({e2e::kMemtrace, "timeline", "--from", "500s", traces});
  EXPECT_EQ(late.status, 2);
  EXPECT_TRUE(contains(late.err, "memtrace timeline: --from 500s: the run (pid ")) << late.err;
  EXPECT_TRUE(contains(late.err, ") lasted ")) << late.err;
  e2e::Result step = e2e::run({e2e::kMemtrace, "timeline", "--to", "step:50", traces});
  EXPECT_EQ(step.status, 2);
  EXPECT_TRUE(contains(step.err, "memtrace timeline: --to step:50: the run (pid ")) << step.err;
  e2e::Result device = e2e::run({e2e::kMemtrace, "peak", "--device", "3", traces});
  EXPECT_EQ(device.status, 2);
  EXPECT_TRUE(contains(device.err, "memtrace peak: --device 3: the run used device 0")) << device.err;
  EXPECT_EQ(e2e::run({e2e::kMemtrace, "peak", "--device", "0", traces}).status, 0);
}

// Without a GPU and without --sim, the summary names the error and the way out (item 8).
TEST(NoGpu, TheSummaryNamesTheErrorAndSuggestsSim) {
  if (std::filesystem::exists("/dev/nvidiactl")) GTEST_SKIP() << "this machine has an NVIDIA driver";
  const std::string dir = e2e::temp_dir("no-gpu");
  e2e::Result r = e2e::run({"/usr/bin/env", "-u", "LD_LIBRARY_PATH", e2e::kMemtrace, "run", "-o", dir + "/traces", "--",
                            e2e::sample_path("train_loop"), "--steps", "1"});
  EXPECT_TRUE(
      contains(r.err, "every allocation failed with CUDA error 35 (insufficient driver: no NVIDIA driver here)"))
      << r.err;
  EXPECT_TRUE(contains(r.err, "memtrace run --sim runs the program on a simulated one")) << r.err;
}

// The CI gate's edges (issue 31, item 7): a percent with its sign, an option misspelt, a run that
// cannot be read (CI must still get a JUnit file), and a regression named by what grew.
TEST(CheckGate, TheEdgesCIMeets) {
  const std::string dir = e2e::temp_dir("check-gate"), base = dir + "/base/traces", next = dir + "/next/traces";
  ASSERT_EQ(e2e::run_sample(dir + "/base", "train_loop", {"--steps", "4"}).status, 0);
  ASSERT_EQ(e2e::run_sample(dir + "/next", "train_loop", {"--steps", "4", "--layer-mib", "20"}).status, 0);
  // The peak grew by a quarter; the model's weights (built in build_model) grew the most.
  e2e::Result grew = e2e::run({e2e::kMemtrace, "check", next, "--baseline", base, "--max-regression", "5%"});
  EXPECT_EQ(grew.status, 1) << grew.err;
  EXPECT_TRUE(contains(grew.out, "FAILED  max-regression: 25.0% exceeds 5.0%")) << grew.out;
  EXPECT_TRUE(contains(grew.out, "+128 MiB  cudaMalloc  device_alloc ← build_model")) << grew.out;
  EXPECT_EQ(e2e::run({e2e::kMemtrace, "check", next, "--baseline", base, "--max-regression", "30"}).status, 0);
  e2e::Result odd = e2e::run({e2e::kMemtrace, "check", next, "--baseline", base, "--max-regression", "5x"});
  EXPECT_EQ(odd.status, 2);
  EXPECT_TRUE(contains(odd.err, "'5x' is not a percent")) << odd.err;

  e2e::Result typo = e2e::run({e2e::kMemtrace, "check", next, "--max-peek", "1GiB"});
  EXPECT_EQ(typo.status, 2);
  EXPECT_TRUE(contains(typo.err, "--max-peek is not an option of memtrace check; did you mean --max-peak?"))
      << typo.err;
  // After the program's name, options are the program's: no memtrace option is suggested for them.
  e2e::Result program = e2e::run({e2e::kMemtrace, "run", "--sim", "-o", dir + "/p", "/bin/true", "--backends", "2"});
  EXPECT_EQ(program.status, 125);
  EXPECT_FALSE(contains(program.err, "did you mean")) << program.err;
  e2e::Result own = e2e::run({e2e::kMemtrace, "run", "--sim", "--backends", "2", "-o", dir + "/p", "--", "/bin/true"});
  EXPECT_TRUE(contains(own.err, "--backends is not an option of memtrace run; did you mean --backend?")) << own.err;
  e2e::Result far = e2e::run({e2e::kMemtrace, "report", next, "--colour"});
  EXPECT_EQ(far.status, 2);
  EXPECT_FALSE(contains(far.err, "did you mean")) << far.err;  // nothing near: CLI11's own line

  const std::string junit = dir + "/check.xml";
  e2e::Result missing =
      e2e::run({e2e::kMemtrace, "check", dir + "/no-such-run", "--max-peak", "1GiB", "--junit", junit});
  EXPECT_EQ(missing.status, 2);
  std::ifstream in(junit);
  std::stringstream xml;
  xml << in.rdbuf();
  EXPECT_TRUE(contains(xml.str(), "tests=\"1\" failures=\"0\" errors=\"1\"")) << xml.str();
  EXPECT_TRUE(contains(xml.str(), "<error message=\"UNMEASURED  read " + dir + "/no-such-run: ")) << xml.str();

  for (const char* command : {"report", "peak", "leaks", "frag", "timeline", "check", "html", "export"})
    EXPECT_TRUE(contains(e2e::run({e2e::kMemtrace, command, "--help"}).out, "PyTorch memory snapshot")) << command;
}

// Small things that read wrong (item 11): "1 allocations", "0 B" for a mark, a snapshot's timeline
// naming "pid 0", and a timeline heading that read as if its peak lasted the whole window.
TEST(Wording, CountsMarksSnapshotsAndTimelines) {
  const std::string dir = e2e::temp_dir("wording");
  ASSERT_EQ(e2e::run_sample(dir, "leak", {"--iterations", "1"}).status, 0);  // one buffer kept
  e2e::Result one = e2e::run({e2e::kMemtrace, "report", dir + "/traces"});
  EXPECT_TRUE(contains(one.out, " in 1 allocation\n")) << one.out;
  e2e::Result leaks = e2e::run({e2e::kMemtrace, "leaks", dir + "/traces"});
  EXPECT_TRUE(contains(leaks.out, " live at exit in 1 allocation\n")) << leaks.out;

  const std::string steps = e2e::temp_dir("wording-steps");
  ASSERT_EQ(e2e::run_sample(steps, "steps").status, 0);
  e2e::Result marks = e2e::run({e2e::kMemtrace, "report", steps + "/traces"});
  std::istringstream lines(marks.out);
  std::string line;
  bool seen = false;
  while (std::getline(lines, line))
    if (contains(line, "nvtxMark ")) {
      seen = true;
      EXPECT_EQ(line.substr(line.find_last_not_of(' ')), "-") << line;  // no bytes for a mark
    }
  EXPECT_TRUE(seen) << marks.out;
  e2e::Result timeline = e2e::run({e2e::kMemtrace, "timeline", steps + "/traces"});
  EXPECT_TRUE(contains(timeline.out, "device 0 reserved, ")) << timeline.out;
  EXPECT_TRUE(contains(timeline.out, ": at most 58.0 MiB\n")) << timeline.out;
  EXPECT_FALSE(contains(timeline.out, ": peak ")) << timeline.out;

  e2e::Result snapshot =
      e2e::run({e2e::kMemtrace, "timeline", std::string(MEMTRACE_TEST_DATA) + "/torch/2.1-finetune.pickle"});
  EXPECT_EQ(snapshot.status, 0) << snapshot.err;
  EXPECT_TRUE(contains(snapshot.out, "snapshot 2.1-finetune.pickle device 0 reserved, ")) << snapshot.out;
  EXPECT_FALSE(contains(snapshot.out, "pid 0")) << snapshot.out;
}

// The demo, as the README gives it (item 9): a few lines of its own, no build output, no sample's
// account, a run with steps and a leak named by its caller, and what to try next.
TEST(Demo, ShowsStepsALeakAndWhatToTryNext) {
  const std::string out = e2e::temp_dir("demo") + "/traces";
  e2e::Result demo = e2e::run({MEMTRACE_SOURCE_DIR "/scripts/demo"},
                              {"MEMTRACE_BUILD_DIR=" MEMTRACE_BUILD_DIR, "MEMTRACE_DEMO_OUT=" + out});
  ASSERT_EQ(demo.status, 0) << demo.out << demo.err;
  EXPECT_FALSE(contains(demo.out, "memtrace-sample:")) << demo.out;
  EXPECT_FALSE(contains(demo.out, "Built target")) << demo.out;
  EXPECT_LT(std::count(demo.out.begin(), demo.out.end(), '\n'), 60) << demo.out;
  EXPECT_TRUE(contains(demo.out, "device_alloc \u2190 build_model at train_loop.cpp:")) << demo.out;
  EXPECT_TRUE(contains(demo.out, "2.00 MiB/step")) << demo.out;
  EXPECT_TRUE(contains(demo.out, "device_alloc \u2190 log_metrics at train_loop.cpp:")) << demo.out;
  EXPECT_TRUE(contains(demo.out, "growing step by step (over 10 steps)")) << demo.out;
  EXPECT_TRUE(contains(demo.out, "Next, on this run:")) << demo.out;
  EXPECT_TRUE(contains(demo.out, "html " + out + " -o demo.html")) << demo.out;
  // The gate it suggests says what it promises.
  EXPECT_EQ(e2e::run({e2e::kMemtrace, "check", out, "--max-growth-per-step", "1MiB"}).status, 1);
  EXPECT_EQ(e2e::run({e2e::kMemtrace, "check", out, "--max-growth-per-step", "3MiB"}).status, 0);
}

// The memory-viz export keeps the steps (item 10): as PyTorch's external annotations, a START and
// an END a step, which memtrace reads back as steps.
TEST(MemoryViz, TheStepsAreItsAnnotations) {
  const std::string dir = e2e::temp_dir("viz-steps"), json = dir + "/viz.json", pickle = dir + "/viz.pickle";
  ASSERT_EQ(e2e::run_sample(dir, "train_loop", {"--steps", "4"}).status, 0);
  ASSERT_EQ(e2e::run({e2e::kMemtrace, "export", "--format", "memory-viz", "-o", json, dir + "/traces"}).status, 0);
  std::ifstream in(json);
  nlohmann::json viz = nlohmann::json::parse(in);
  const auto& annotations = viz["external_annotations"];
  ASSERT_EQ(annotations.size(), 8u) << annotations.dump(1);
  for (size_t i = 0; i < annotations.size(); ++i) {
    EXPECT_EQ(annotations[i]["stage"], i % 2 ? "END" : "START");
    EXPECT_EQ(annotations[i]["name"], "memtrace.step");
    EXPECT_EQ(annotations[i]["device"], 0);
    if (i) {
      EXPECT_GE(annotations[i]["time_us"].get<int64_t>(), annotations[i - 1]["time_us"].get<int64_t>());
    }
  }
  ASSERT_EQ(e2e::run({e2e::kMemtrace, "export", "--format", "memory-viz", "-o", pickle, dir + "/traces"}).status, 0);
  EXPECT_TRUE(contains(e2e::run({e2e::kMemtrace, "leaks", pickle}).out, "over 4 steps"));
  // PyTorch records an annotation once for each device: still one step each.
  const std::string twice = dir + "/twice.pickle";
  e2e::Result made = e2e::run({MEMTRACE_PYTHON, "-c",
                               "import json, pickle, sys\n"
                               "s = json.load(open(sys.argv[1]))\n"
                               "s['external_annotations'] += [dict(a, device=1) for a in s['external_annotations']]\n"
                               "pickle.dump(s, open(sys.argv[2], 'wb'))\n",
                               json, twice});
  ASSERT_EQ(made.status, 0) << made.err;
  EXPECT_TRUE(contains(e2e::run({e2e::kMemtrace, "leaks", twice}).out, "over 4 steps"));
}

// A site that holds what the program set up and grows a step (one helper for both, seen --by api,
// or in an imported snapshot without the modules that tell callers apart) grows by its leak alone:
// the setup before the first step boundary is no growth.
TEST(Growth, SetupBeforeTheFirstStepIsNoGrowth) {
  const std::string dir = e2e::temp_dir("setup-growth");
  ASSERT_EQ(e2e::run_sample(dir, "train_loop", {"--steps", "10", "--leak-kib", "2048"}).status, 0);
  for (const char* by : {"user", "api"}) {
    nlohmann::json p =
        e2e::command_json({e2e::kMemtrace, "leaks", "--json", "--by", by, dir + "/traces"})["processes"][0];
    ASSERT_EQ(p["growth"].size(), 1u) << by << ": " << p["growth"].dump(2);
    EXPECT_EQ(p["growth"][0]["bytes_per_step"], 2u << 20) << by;
  }
}

}  // namespace

// 2. A limit the run gives nothing to measure does not pass: growth per step without steps.
TEST(NoSteps, GrowthIsNotMeasuredAndSaysWhy) {
  const std::string dir = e2e::temp_dir("no-steps"), traces = dir + "/traces", junit = dir + "/check.xml";
  ASSERT_EQ(e2e::run_sample(dir, "leak", {"--iterations", "5"}).status, 0);
  e2e::Result check = e2e::run(
      {e2e::kMemtrace, "check", traces, "--max-growth-per-step", "1MiB", "--max-peak", "1TiB", "--junit", junit});
  EXPECT_EQ(check.status, 2) << check.out << check.err;
  EXPECT_TRUE(contains(check.out, "UNMEASURED  max-growth-per-step: needs 3 steps or more (found 0")) << check.out;
  EXPECT_TRUE(contains(check.out, "ok      max-peak")) << check.out;  // the others are still evaluated
  EXPECT_FALSE(contains(check.out, "within 1.00 MiB")) << check.out;
  std::ifstream in(junit);
  std::stringstream xml;
  xml << in.rdbuf();
  EXPECT_TRUE(contains(xml.str(), "tests=\"2\" failures=\"0\" errors=\"1\"")) << xml.str();
  EXPECT_TRUE(contains(xml.str(), "<error message=\"UNMEASURED")) << xml.str();
  nlohmann::json j =
      nlohmann::json::parse(e2e::run({e2e::kMemtrace, "check", "--json", traces, "--max-growth-per-step", "1MiB"}).out);
  EXPECT_FALSE(j["passed"].get<bool>());
  EXPECT_FALSE(j["measured"].get<bool>());

  // diff: no "0 B -> 0 B" for a figure neither run has.
  e2e::Result diff = e2e::run({e2e::kMemtrace, "diff", traces, traces});
  EXPECT_TRUE(contains(diff.out, "growth per step             not measured (each run needs 3 steps")) << diff.out;
  nlohmann::json d = e2e::command_json({e2e::kMemtrace, "diff", "--json", traces, traces});
  EXPECT_TRUE(d["growth_per_step"].is_null());
  EXPECT_TRUE(contains(d["growth_per_step_unmeasured"], "needs 3 steps")) << d.dump(2);

  // leaks: what is live at exit is only "live", neither kept nor growing.
  nlohmann::json leaks = e2e::command_json({e2e::kMemtrace, "leaks", "--json", traces});
  const auto& p = leaks["processes"][0];
  EXPECT_FALSE(p["growth_measured"].get<bool>());
  ASSERT_FALSE(p["devices"][0]["sites"].empty());
  for (const auto& s : p["devices"][0]["sites"]) EXPECT_EQ(s["kind"], "live") << s.dump(2);
  e2e::Result text = e2e::run({e2e::kMemtrace, "leaks", traces});
  EXPECT_FALSE(contains(text.out, "kept")) << text.out;
  EXPECT_TRUE(contains(text.out, "sites are marked live")) << text.out;
}

// 3. A second run into the same folder is refused, unless asked to add to it.
TEST(OutputFolder, HoldingAnotherRunsTracesIsRefusedUnlessAppending) {
  const std::string dir = e2e::temp_dir("reused"), traces = dir + "/traces";
  ASSERT_EQ(e2e::run_sample(dir, "hold", {"--buffers", "1", "--hold-ms", "0"}).status, 0);
  e2e::Result again = e2e::run_sample(dir, "hold", {"--buffers", "2", "--hold-ms", "0"});
  EXPECT_EQ(again.status, 125);
  EXPECT_TRUE(contains(again.err, "already holds the traces of another run")) << again.err;
  EXPECT_TRUE(contains(again.err, "--append")) << again.err;
  EXPECT_EQ(std::count(again.err.begin(), again.err.end(), '\n'), 1) << again.err;  // one line
  EXPECT_EQ(e2e::command_json({e2e::kMemtrace, "peak", "--json", traces})["processes"].size(), 1u);

  e2e::Result appended = e2e::run_sample(dir, "hold", {"--buffers", "2", "--hold-ms", "0"}, {"--append"});
  EXPECT_EQ(appended.status, 0) << appended.err;
  EXPECT_EQ(e2e::command_json({e2e::kMemtrace, "peak", "--json", traces})["processes"].size(), 2u);

  // A folder that exists but holds no traces is used as it is.
  const std::string empty = e2e::temp_dir("empty-output");
  std::filesystem::create_directories(empty + "/traces");
  EXPECT_EQ(e2e::run_sample(empty, "hold", {"--buffers", "1", "--hold-ms", "0"}).status, 0);
}

// 4. A program that only asked for devices, or whose allocations all failed, keeps its trace,
// and the summary says what happened.
TEST(NoDeviceMemory, TheTraceIsKeptAndSaysWhatHappened) {
  const std::string asked = e2e::temp_dir("asked-for-devices");
  e2e::Result one_device = e2e::run_sample(asked, "multi_device");  // needs two, finds one, exits 2
  EXPECT_EQ(one_device.status, 2);
  EXPECT_FALSE(contains(one_device.err, "never used CUDA")) << one_device.err;
  EXPECT_TRUE(contains(one_device.err, "(0 events, exit status 2): used CUDA, allocated no device memory"))
      << one_device.err;
  nlohmann::json report = e2e::report_json(asked + "/traces");
  ASSERT_EQ(report["processes"].size(), 1u);
  EXPECT_EQ(report["processes"][0]["exit_status"], 2);
  e2e::Result text = e2e::run({e2e::kMemtrace, "report", asked + "/traces"});
  EXPECT_TRUE(
      contains(text.out, "used CUDA (it initialised CUDA or asked for its devices) but made no allocation call"))
      << text.out;

  const std::string failed = e2e::temp_dir("every-allocation-failed");
  e2e::Result full = e2e::run_sample(failed, "hold", {"--hold-ms", "0"}, {"--sim-capacity", "1MiB"});
  EXPECT_EQ(full.status, 2);
  EXPECT_TRUE(contains(full.err, "(1 event, exit status 2): no device memory: every allocation failed")) << full.err;
  EXPECT_EQ(e2e::report_json(failed + "/traces")["processes"][0]["events"]["cudaMalloc"]["failed"], 1u);
}

// 6. Sites that read alike are told apart by their callers; text prints the merged stack from
// the site's frame out, without the C runtime's start-up frames.
TEST_F(TrainLoop, RowsThatReadAlikeNameTheirCallers) {
  nlohmann::json peak = e2e::command_json({e2e::kMemtrace, "peak", "--json", "--by", "stack", traces()});
  const auto& sites = peak["processes"][0]["devices"][0]["sites"];
  ASSERT_EQ(sites.size(), 6u) << sites.dump(2);
  std::set<std::string> labels;
  for (const auto& s : sites) labels.insert(s["location"].get<std::string>());
  EXPECT_EQ(labels.size(), 6u) << sites.dump(2);
  const std::string source = std::string(MEMTRACE_SAMPLES_SOURCE) + "/train_loop.cpp";
  std::ifstream in(source);
  std::string line;
  uint32_t number = 0, weights = 0;
  while (std::getline(in, line) && !weights)
    if (++number && line.find("m.weights.push_back(device_alloc(") != std::string::npos) weights = number;
  EXPECT_EQ(labels.count("device_alloc \u2190 build_model at train_loop.cpp:" + std::to_string(weights)), 1u)
      << sites.dump(2);
  e2e::Result text = e2e::run({e2e::kMemtrace, "peak", "--by", "stack", traces()});
  EXPECT_TRUE(contains(text.out, "device_alloc \u2190 forward at train_loop.cpp:")) << text.out;
}

TEST(Stacks, ALeakThroughAPythonHelperShowsWhoCalledIt) {
  const std::string dir = e2e::temp_dir("python-leak"), traces = dir + "/traces";
  ASSERT_EQ(e2e::run_traced(dir, e2e::python_sample("leak.py", {"5"})).status, 0);
  const std::string accumulate =
      "leak.py:" + std::to_string(e2e::marked_line(e2e::python_sample_path("leak.py"), "leak")) +
      " in accumulate_stats";
  e2e::Result leaks = e2e::run({e2e::kMemtrace, "leaks", traces});
  // The helper named with its caller, the caller's frame right under it.
  const std::string line = std::to_string(e2e::marked_line(e2e::python_sample_path("leak.py"), "leak"));
  EXPECT_TRUE(
      contains(leaks.out, "malloc \u2190 accumulate_stats at leak.py:" + line + "\n          " + accumulate + "\n"))
      << leaks.out;

  const std::string more = e2e::temp_dir("python-leak-more");
  ASSERT_EQ(e2e::run_traced(more, e2e::python_sample("leak.py", {"15"})).status, 0);
  e2e::Result diff = e2e::run({e2e::kMemtrace, "diff", traces, more + "/traces"});
  EXPECT_TRUE(contains(diff.out, accumulate)) << diff.out;  // Python frames, not empty native lines
  EXPECT_FALSE(contains(diff.out, "\n                \n")) << diff.out;

  const std::string native = e2e::temp_dir("native-leak");
  ASSERT_EQ(e2e::run_sample(native, "leak", {"--iterations", "3"}).status, 0);
  e2e::Result text = e2e::run({e2e::kMemtrace, "leaks", native + "/traces"});
  EXPECT_TRUE(contains(text.out, "main at leak.cpp:")) << text.out;
  EXPECT_FALSE(contains(text.out, "__libc_start")) << text.out;
  EXPECT_FALSE(contains(text.out, "_start")) << text.out;
}

// 7. memtrace run's own failures exit 125, whatever stage finds them, never the parser's 2.
TEST(ExitStatus, RunsOwnFailuresAre125) {
  e2e::Result bad_option = e2e::run({e2e::kMemtrace, "run", "--sim", "--sim-devices", "0", "--", "true"});
  EXPECT_EQ(bad_option.status, 125) << bad_option.err;
  EXPECT_TRUE(contains(bad_option.err, "memtrace run: --sim-devices")) << bad_option.err;
  EXPECT_EQ(e2e::run({e2e::kMemtrace, "run", "--no-such-option", "--", "true"}).status, 125);
  EXPECT_EQ(e2e::run({e2e::kMemtrace, "run", "--sim-capacity", "lots", "--sim", "--", "true"}).status, 125);
  // The program's own 2 is still its own.
  const std::string dir = e2e::temp_dir("program-exits-2");
  EXPECT_EQ(e2e::run_traced(dir, {"/bin/sh", "-c", "exit 2"}).status, 2);
}

// 11. Help for mistakes: the nearest command, the usage line, the GPUs estimate knows.
TEST(Help, MistakesAreAnsweredWithWhatWasMeant) {
  e2e::Result typo = e2e::run({e2e::kMemtrace, "reprot", "x"});
  EXPECT_EQ(typo.status, 2);
  EXPECT_TRUE(contains(typo.err, "'reprot' is not a memtrace command; did you mean 'report'?")) << typo.err;
  EXPECT_TRUE(contains(typo.err, "run, attach, detach, report, snapshot")) << typo.err;
  e2e::Result nothing = e2e::run({e2e::kMemtrace});
  EXPECT_EQ(nothing.status, 2);
  EXPECT_TRUE(contains(nothing.err, "Usage: memtrace [OPTIONS] SUBCOMMAND")) << nothing.err;
  EXPECT_TRUE(contains(nothing.err, "leaks")) << nothing.err;
  e2e::Result no_path = e2e::run({e2e::kMemtrace, "report"});
  EXPECT_EQ(no_path.status, 2);
  EXPECT_TRUE(contains(no_path.err, "usage: memtrace report [OPTIONS] path")) << no_path.err;
  e2e::Result gpu = e2e::run({e2e::kMemtrace, "estimate", "--model", "gpt2", "--gpu", "A100"});  // two A100s
  EXPECT_EQ(gpu.status, 2);
  EXPECT_TRUE(contains(gpu.err, "A100-40GB A100-80GB")) << gpu.err;
  EXPECT_TRUE(contains(gpu.err, "H100-80GB")) << gpu.err;
  EXPECT_EQ(e2e::run({e2e::kMemtrace, "estimate", "--model", "gpt2", "--gpu", "h100"}).status, 0);  // one H100
}

// 12. The help is a guide: the commands by what they are for, and each command's help ends with
// an example (tests/docs/examples.py runs them).
TEST(Help, CommandsAreGroupedAndEachEndsWithAnExample) {
  e2e::Result help = e2e::run({e2e::kMemtrace, "--help"});
  EXPECT_EQ(help.status, 0);
  size_t at = 0;
  for (const char* group : {"Record:", "Analyse:", "Compare and gate:", "Export:", "Jobs:", "Examples:"}) {
    size_t found = help.out.find(std::string("\n") + group + "\n", at);
    EXPECT_NE(found, std::string::npos) << group << " not after the one before it in:\n" << help.out;
    if (found != std::string::npos) at = found;
  }
  for (const char* command : {"run", "attach", "detach", "report", "snapshot", "peak", "leaks", "frag", "timeline",
                              "estimate", "explain", "diff", "check", "verify", "html", "export", "summarize"}) {
    e2e::Result one = e2e::run({e2e::kMemtrace, command, "--help"});
    EXPECT_EQ(one.status, 0) << command;
    size_t example = one.out.rfind("Example:\n  memtrace ");
    EXPECT_NE(example, std::string::npos) << command << ":\n" << one.out;
    if (example != std::string::npos) {
      EXPECT_EQ(one.out.find('\n', one.out.find("memtrace ", example)), one.out.size() - 1)
          << command << " ends otherwise";
    }
  }
}

// 10. A CI rerun replaces its JUnit file and still prints its verdict.
TEST_F(TrainLoop, CheckRerunsReplaceTheirJUnitFile) {
  const std::string junit = *dir_ + "/st.xml";
  ASSERT_EQ(e2e::run({e2e::kMemtrace, "check", traces(), "--max-peak", "1TiB", "--junit", junit}).status, 0);
  e2e::Result rerun = e2e::run({e2e::kMemtrace, "check", traces(), "--max-peak", "1MiB", "--junit", junit});
  EXPECT_EQ(rerun.status, 1) << rerun.err;
  EXPECT_TRUE(contains(rerun.out, "FAILED  max-peak")) << rerun.out;
  std::ifstream in(junit);
  std::stringstream xml;
  xml << in.rdbuf();
  EXPECT_TRUE(contains(xml.str(), "failures=\"1\"")) << xml.str();
  // A JUnit file that cannot be written: the verdict is printed all the same.
  e2e::Result unwritable =
      e2e::run({e2e::kMemtrace, "check", traces(), "--max-peak", "1TiB", "--junit", *dir_ + "/no/such/dir/st.xml"});
  EXPECT_EQ(unwritable.status, 2);
  EXPECT_TRUE(contains(unwritable.out, "memtrace check: every limit holds")) << unwritable.out;
}

// 10. Every export replaces what is at its path too (the streamed ones as well), but never a trace.
TEST_F(TrainLoop, ExportsReplaceWhatIsAtTheirPathButNeverATrace) {
  for (const std::string format : {"jsonl", "chrome", "folded"}) {
    const std::string file = *dir_ + "/export." + format;
    { std::ofstream(file) << "from an earlier run\n"; }
    e2e::Result r = e2e::run({e2e::kMemtrace, "export", "--format", format, "-o", file, traces()});
    EXPECT_EQ(r.status, 0) << format << ": " << r.err;
    std::ifstream in(file);
    std::string first;
    std::getline(in, first);
    EXPECT_NE(first, "from an earlier run") << format;
    EXPECT_FALSE(first.empty()) << format;
  }
  std::string trace;
  for (const auto& entry : std::filesystem::directory_iterator(traces())) trace = entry.path().string();
  const auto size = std::filesystem::file_size(trace);
  e2e::Result over = e2e::run({e2e::kMemtrace, "export", "--format", "jsonl", "-o", trace, traces()});
  EXPECT_EQ(over.status, 1);
  EXPECT_TRUE(contains(over.err, "is a memtrace trace: it is not written over")) << over.err;
  EXPECT_EQ(std::filesystem::file_size(trace), size);
  for (const auto& entry : std::filesystem::directory_iterator(*dir_))  // no temporary left behind
    EXPECT_FALSE(contains(entry.path().filename().string(), "memtrace-tmp")) << entry.path();
}

// 13. Wording: a descendant's ending says what memtrace saw.
TEST(Wording, ADescendantsEndingSaysWhatMemtraceSaw) {
  const std::string dir = e2e::temp_dir("descendants");
  ASSERT_EQ(e2e::run_sample(dir, "processes").status, 0);
  e2e::Result text = e2e::run({e2e::kMemtrace, "report", dir + "/traces"});
  EXPECT_FALSE(contains(text.out, "ended: ended")) << text.out;
  EXPECT_TRUE(contains(text.out, "ended: closed its connection (a descendant: memtrace cannot see its exit status)"))
      << text.out;
  EXPECT_TRUE(contains(text.out, "ended: exited, exit status 0")) << text.out;  // the program itself
}

// 8. What made every traced process wait ~70 ms at its exit: libc's compressed separate debug
// information, read to give glibc's own source lines. The C runtime's frames are named by their
// symbol tables alone (the figures are in bench/exit_latency).
TEST_F(TrainLoop, TheCRuntimesFramesAreNamedWithoutItsDebugInformation) {
  nlohmann::json report = e2e::report_json(traces());
  size_t libc_frames = 0;
  for (const auto& site : report["processes"][0]["devices"][0]["top_sites_at_peak"])
    for (const auto& frame : site["stack"])
      if (frame["module"].get<std::string>().find("/libc.so.6") != std::string::npos) {
        ++libc_frames;
        EXPECT_FALSE(frame["function"].get<std::string>().empty()) << frame.dump();
        EXPECT_EQ(frame["file"], "") << frame.dump();
      }
  EXPECT_GT(libc_frames, 0u) << report.dump(2);
}

// 12. estimate says what it assumed, warns of a sequence the model cannot take, and writes
// parameter counts as people do.
TEST(Estimate, SaysItsAssumptionsAndWarnsPastTheContext) {
  e2e::Result gpt2 = e2e::run({e2e::kMemtrace, "estimate", "--model", "gpt2"});
  ASSERT_EQ(gpt2.status, 0) << gpt2.err;
  EXPECT_TRUE(contains(gpt2.out, "GPT-2: 124 M parameters")) << gpt2.out;
  EXPECT_TRUE(contains(gpt2.out,
                       "assuming training (default), sequence 2048 tokens (default), batch 1 per GPU "
                       "(default), bf16 (default), adamw (default), 1 GPU (default)"))
      << gpt2.out;
  EXPECT_TRUE(contains(gpt2.out,
                       "WARNING: the sequence length of 2048 tokens (the default) exceeds GPT-2's context "
                       "of 1024 tokens"))
      << gpt2.out;
  e2e::Result fits = e2e::run({e2e::kMemtrace, "estimate", "--model", "gpt2", "--seq", "1024", "--batch", "4"});
  EXPECT_FALSE(contains(fits.out, "WARNING")) << fits.out;
  EXPECT_TRUE(contains(fits.out, "sequence 1024 tokens, batch 4 per GPU, bf16 (default)")) << fits.out;
  e2e::Result llama = e2e::run({e2e::kMemtrace, "estimate", "--model", "llama-3-8b"});
  EXPECT_TRUE(contains(llama.out, "Llama-3-8B: 8.03 B parameters")) << llama.out;
  nlohmann::json j = e2e::command_json({e2e::kMemtrace, "estimate", "--model", "gpt2", "--json", "--seq", "512"});
  EXPECT_EQ(j["assumptions"]["seq"], 512);
  EXPECT_TRUE(j["warnings"].empty());
  EXPECT_EQ(j["model"]["max_context"], 1024);
}

// 9. Timelines show the span that has events, label their axes, draw steps so they can be seen,
// keep the legend off the data, and take --from/--to as times or steps.
TEST(Timeline, ShowsTheSpanWithEventsAndTakesAWindow) {
  const std::string dir = e2e::temp_dir("timeline-window"), traces = dir + "/traces";
  ASSERT_EQ(e2e::run_sample(dir, "steps").status, 0);
  nlohmann::json whole = e2e::command_json({e2e::kMemtrace, "timeline", "--json", traces});
  const auto& p = whole["processes"][0];
  const std::vector<uint64_t> steps = p["steps_ns"].get<std::vector<uint64_t>>();
  ASSERT_EQ(steps.size(), 10u);
  // By default: where memory changed, not the whole process (start-up and exit are left out).
  EXPECT_GT(p["from_ns"].get<uint64_t>(), 0u);
  EXPECT_LT(p["from_ns"].get<uint64_t>(), steps.front());
  EXPECT_LE(p["to_ns"].get<uint64_t>(), p["end_ns"].get<uint64_t>());

  // From step 3's start to step 5's end: steps 3, 4 and 5 and nothing before.
  nlohmann::json part =
      e2e::command_json({e2e::kMemtrace, "timeline", "--json", traces, "--from", "step:3", "--to", "step:5"});
  EXPECT_EQ(part["processes"][0]["from_ns"], steps[3]);
  EXPECT_EQ(part["processes"][0]["to_ns"], steps[6]);
  const std::string csv = dir + "/part.csv", svg = dir + "/part.svg";
  ASSERT_EQ(
      e2e::run({e2e::kMemtrace, "timeline", traces, "--from", "step:3", "--to", "step:5", "--csv", csv, "--svg", svg})
          .status,
      0);
  std::ifstream csv_in(csv);
  std::string line;
  std::getline(csv_in, line);
  const uint64_t bucket = part["processes"][0]["bucket_ns"];
  size_t rows = 0;
  while (std::getline(csv_in, line)) {
    ++rows;
    uint64_t t = std::stoull(line.substr(line.find(",", line.find(",", line.find(",") + 1) + 1) + 1));
    EXPECT_GT(t + bucket, steps[3]) << line;
    EXPECT_LT(t, steps[6]) << line;
  }
  EXPECT_GT(rows, 0u);
  std::ifstream svg_in(svg);
  std::stringstream picture;
  picture << svg_in.rdbuf();
  EXPECT_TRUE(contains(picture.str(), "time since the program started")) << "the time axis is named";
  EXPECT_TRUE(contains(picture.str(), ">device memory</text>")) << "the bytes axis is named";
  EXPECT_TRUE(contains(picture.str(), "<title>step 4</title>")) << "steps are drawn";
  EXPECT_FALSE(contains(picture.str(), "<title>step 1</title>")) << "outside the window";
  // The legend stands right of the chart (x 90 to 1050), not over it.
  size_t legend = picture.str().find(" device 0 reserved</text>");
  ASSERT_NE(legend, std::string::npos);
  size_t x = picture.str().rfind("<text x=\"", legend);
  EXPECT_GE(std::stod(picture.str().substr(x + 9)), 1050.0) << picture.str().substr(x, 80);

  e2e::Result bad = e2e::run({e2e::kMemtrace, "timeline", traces, "--from", "soon"});
  EXPECT_EQ(bad.status, 2);
  EXPECT_TRUE(contains(bad.err, "'soon' is not a time or a step")) << bad.err;
}
