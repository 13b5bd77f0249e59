// memtrace.record() from inside a Python program (injector/python/memtrace/recording.py) on the
// simulated device, with no LD_PRELOAD: only the block is recorded, with Python stacks, from the
// program's threads with the GIL released; what was allocated before it is said, not guessed; a
// snapshot on demand; a second recording refused; a program killed while recording leaves a
// complete trace; and under `memtrace run` the call is refused and the program goes on.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "harness.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

const std::string kPackage = "PYTHONPATH=" MEMTRACE_BUILD_DIR "/lib/python:" MEMTRACE_PYTHON_SAMPLES;
const std::string kSimulated = "LD_LIBRARY_PATH=" MEMTRACE_SIM_DIR;
const std::string kSample = MEMTRACE_PYTHON_SAMPLES "/record_block.py";

json report(const std::string& folder) {
  e2e::Result r = e2e::run({e2e::kMemtrace, "report", "--json", folder});
  EXPECT_EQ(r.status, 0) << r.err;
  return r.status == 0 ? json::parse(r.out)["processes"][0] : json();
}

class Record : public ::testing::TestWithParam<e2e::Python> {};

TEST_P(Record, OnlyTheBlockIsRecordedWithItsPythonFrames) {
  const std::string dir = e2e::temp_dir("record"), out = dir + "/out";
  e2e::Result r =
      e2e::run({GetParam().path, kSample, out, "--twice"}, e2e::with_sanitizer_runtime({kPackage, kSimulated}));
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  auto accounts = e2e::sample_accounts(r.out);
  ASSERT_EQ(accounts.size(), 1u) << r.out;
  const json account = accounts.begin()->second;
  EXPECT_TRUE(contains(r.out, "second start refused: memtrace records a process once")) << r.out;
  EXPECT_TRUE(contains(r.err, "memtrace: 1 traced process, traces in")) << r.err;

  json p = report(out);
  EXPECT_EQ(p["end_reason"], "recording stopped (memtrace.stop)");
  // The block's calls, and the free of an allocation made before it (recorded, matched to nothing).
  EXPECT_EQ(p["events"]["cudaMalloc"]["calls"], account["calls"]["cudaMalloc"]) << p["events"].dump();
  EXPECT_EQ(p["events"]["cudaFree"]["calls"], account["calls"]["cudaFree"]) << p["events"].dump();
  EXPECT_EQ(p["unmatched_frees"], 1);
  const json device = p["devices"][0];
  EXPECT_EQ(device["peak_reserved_bytes"], account["peak_bytes"]);
  EXPECT_EQ(device["live_at_exit_bytes"], account["live_bytes"]);
  EXPECT_GE(device["device_samples"].get<uint64_t>(), 1u) << "the device layer at the start";
  EXPECT_TRUE(contains(p["notices"].dump(), "what it allocated before recording started is not in this trace"))
      << p["notices"].dump();

  // Python frames, from the main thread and from the worker (GIL released around each call).
  e2e::Result stacks = e2e::run({e2e::kMemtrace, "peak", "--by", "stack", out});
  EXPECT_TRUE(contains(stacks.out, "record_block.py:20")) << stacks.out;  // load_weights
  EXPECT_TRUE(contains(stacks.out, "record_block.py:24")) << stacks.out;  // step
  e2e::Result leaks = e2e::run({e2e::kMemtrace, "leaks", "--by", "stack", out});
  EXPECT_TRUE(contains(leaks.out, "loader at record_block.py:30")) << leaks.out;  // the worker thread

  // memtrace.snapshot(): written when it returned, read by memtrace snapshot.
  const std::string snapshot = fs::path(out).parent_path() / account["snapshot"].get<std::string>();
  ASSERT_TRUE(fs::exists(dir + "/" + account["snapshot"].get<std::string>()) || fs::exists(snapshot)) << account.dump();
  e2e::Result shown = e2e::run({e2e::kMemtrace, "snapshot", "--json", out});
  ASSERT_EQ(shown.status, 0) << shown.err;
  EXPECT_EQ(json::parse(shown.out)["reason"], "demand") << shown.out;
}

INSTANTIATE_TEST_SUITE_P(CPython, Record, ::testing::ValuesIn(e2e::readable_pythons()), [](const auto& info) {
  return (info.param.path.rfind("/usr/", 0) == 0 ? "system_3_" : "pyenv_3_") + std::to_string(info.param.minor);
});
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Record);

// Killed inside the block: the collector, a process of its own, still finishes the trace.
TEST(RecordInProcess, AProgramKilledWhileRecordingLeavesACompleteTrace) {
  const std::string dir = e2e::temp_dir("record-killed"), out = dir + "/out";
  e2e::Result r =
      e2e::run({MEMTRACE_PYTHON, kSample, out, "--die-inside"}, e2e::with_sanitizer_runtime({kPackage, kSimulated}));
  EXPECT_EQ(r.status, 128 + 9) << r.out << r.err;
  ASSERT_TRUE(contains(r.out, "dying")) << r.out;
  // The collector finishes once it has seen the process go: wait for the trace's footer.
  json p;
  for (int tries = 0; tries < 600; ++tries) {
    e2e::Result seen = e2e::run({e2e::kMemtrace, "report", "--json", out});
    if (seen.status == 0 && (p = json::parse(seen.out)["processes"][0])["complete"] == true) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // polling for the file, not a fixed wait
  }
  ASSERT_EQ(p["complete"], true) << p.dump();
  EXPECT_TRUE(contains(p["end_reason"].get<std::string>(), "ended while recorded from inside it")) << p.dump();
  EXPECT_EQ(p["events"]["cudaMalloc"]["calls"], 16);
}

TEST(RecordInProcess, UnderMemtraceRunItIsRefusedAndTheProgramGoesOn) {
  const std::string dir = e2e::temp_dir("record-under-run");
  e2e::Result r = e2e::run({e2e::kMemtrace, "run", "--sim", "-o", dir + "/traces", "--", MEMTRACE_PYTHON, "-c",
                            "import memtrace\n"
                            "try:\n"
                            "    memtrace.start('" +
                                dir +
                                "/inner')\n"
                                "except memtrace.MemtraceError as e:\n"
                                "    print('refused:', e)\n"
                                "print('went on')\n"},
                           {kPackage});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "refused: this process runs under `memtrace run`")) << r.out;
  EXPECT_TRUE(contains(r.out, "went on")) << r.out;
  EXPECT_FALSE(fs::exists(dir + "/inner"));
}

// Without a CUPTI to subscribe to (none on the library path), start() says why and leaves
// nothing running: no folder, no collector, the program unharmed.
TEST(RecordInProcess, WithoutCuptiItSaysWhyAndLeavesNothing) {
  const std::string dir = e2e::temp_dir("record-no-cupti");
  e2e::Result r = e2e::run({MEMTRACE_PYTHON, "-c",
                            "import memtrace\n"
                            "try:\n"
                            "    memtrace.start('" +
                                dir +
                                "/out')\n"
                                "except memtrace.MemtraceError as e:\n"
                                "    print('refused:', e)\n"
                                "print('went on')\n"},
                           e2e::with_sanitizer_runtime({kPackage, "MEMTRACE_CUPTI_LIBRARY=/nonexistent/libcupti.so"}));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "refused: memtrace cannot record this process: CUPTI")) << r.out;
  EXPECT_TRUE(contains(r.out, "went on")) << r.out;
}

// PyTorch started before the block: its tracker attaches when recording starts, so the block's
// tensors, its steps and a leak among them are seen as under `memtrace run`.
TEST(RecordInProcess, PyTorchsTensorsAndStepsInsideTheBlock) {
  const std::string dir = e2e::temp_dir("record-torch"), out = dir + "/out";
  e2e::Result r = e2e::run(
      {MEMTRACE_PYTHON, MEMTRACE_PYTHON_SAMPLES "/torch_record.py", out},
      e2e::with_sanitizer_runtime(
          {"PYTHONPATH=" MEMTRACE_BUILD_DIR "/lib/python:" MEMTRACE_SIM_DIR "/torch/site-packages", kSimulated}));
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  json p = report(out);
  EXPECT_GT(p["events"]["torch.alloc"]["calls"].get<uint64_t>(), 0u) << p["events"].dump();
  // The model made before the block: PyTorch's allocator's state at the start (its two layers'
  // weights; AdamW makes its state at the first step), as allocations live before recording.
  EXPECT_TRUE(contains(p["notices"].dump(), "PyTorch's allocator held, when recording started, 2 tensors in 1 segment"))
      << p["notices"].dump();
  EXPECT_EQ(p["joined_by"], "memtrace.record");
  EXPECT_EQ(p["devices"][0]["at_recording_start"]["known_bytes"], 2 << 20) << p["devices"][0].dump();
  EXPECT_TRUE(contains(e2e::run({e2e::kMemtrace, "leaks", out}).out, "live before recording started"));
  e2e::Result leaks = e2e::run({e2e::kMemtrace, "leaks", "--json", out});
  ASSERT_EQ(leaks.status, 0) << leaks.err;
  json l = json::parse(leaks.out)["processes"][0];
  EXPECT_EQ(l["steps"], 4) << l.dump();
  ASSERT_EQ(l["growth"].size(), 1u) << l.dump(2);
  EXPECT_EQ(l["growth"][0]["bytes_per_step"], 1 << 20);
  EXPECT_TRUE(contains(l["growth"][0]["location"].get<std::string>(), "torch_record.py:25")) << l.dump(2);
}

// A child forked inside the block ends normally: its copy of the package stops nothing, and the
// parent's recording goes on to the end of the block.
TEST(RecordInProcess, AChildForkedInsideTheBlockLeavesTheRecordingAlone) {
  const std::string dir = e2e::temp_dir("record-fork"), out = dir + "/out";
  e2e::Result r =
      e2e::run({MEMTRACE_PYTHON, kSample, out, "--fork-inside"}, e2e::with_sanitizer_runtime({kPackage, kSimulated}));
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  auto accounts = e2e::sample_accounts(r.out);
  ASSERT_EQ(accounts.size(), 1u) << r.out;
  json p = report(out);
  EXPECT_EQ(p["end_reason"], "recording stopped (memtrace.stop)");
  EXPECT_EQ(p["events"]["cudaMalloc"]["calls"], accounts.begin()->second["calls"]["cudaMalloc"]);
}

// An answer left unread (a caller interrupted while it waited) is passed over by the next command.
TEST(RecordInProcess, ALateAnswerIsNotTakenForTheNextOne) {
  const std::string dir = e2e::temp_dir("record-late-answer");
  e2e::Result r = e2e::run({MEMTRACE_PYTHON, "-c",
                            "import cuda, memtrace, memtrace.recording as rec\n"
                            "memtrace.start('" +
                                dir +
                                "/out')\n"
                                "rec._current._collector.stdin.write(b'999 window end\\n')  # never read\n"
                                "rec._current._collector.stdin.flush()\n"
                                "memtrace.begin_window()\n"
                                "kept = cuda.malloc(3 << 20)\n"
                                "print('kept', memtrace.end_window()['reserved']['kept_bytes'])\n"
                                "memtrace.stop()\n"},
                           e2e::with_sanitizer_runtime({kPackage, kSimulated}));
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "kept 3145728")) << r.out;
}

}  // namespace
