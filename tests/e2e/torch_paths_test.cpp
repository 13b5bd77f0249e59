// PyTorch as it really is: the stand-in PyTorch (sim/torch) of each release where PyTorch
// differs (2.1: no trace tracker; 2.3: the class memtrace finds the tracker by is hidden; 2.11:
// exported), and the paths a simple training loop does not take (samples/python/torch_paths.py):
// gradients without storage, FSDP2's DTensors, the program resetting PyTorch's peaks, a MemPool
// whose allocator pre-reserved its memory, torch.compile, a tensor allocated holding the GIL,
// Python run with -E, -I or -S. Every run's allocated layer is held against PyTorch's own counters
// (memory_stats at exit), which memtrace records beside it.
#include <gtest/gtest.h>

#include <fstream>

#include "harness.h"

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string stand_in(const std::string& release) { return MEMTRACE_SIM_DIR "/" + release + "/site-packages"; }
const std::string kPaths = e2e::python_sample_path("torch_paths.py");
const std::string kTrain = e2e::python_sample_path("torch_train.py");

struct TracedRun {
  e2e::Result result;
  std::string dir, traces;
  nlohmann::json process;  // report --json's
  nlohmann::json account;
};

TracedRun traced(const std::string& name, const std::vector<std::string>& command, std::vector<std::string> env = {},
                 const std::string& release = "torch") {
  TracedRun r;
  r.dir = e2e::temp_dir(name);
  r.traces = r.dir + "/traces";
  std::vector<std::string> argv{e2e::kMemtrace, "run", "--sim", "-o", r.traces, "--"};
  argv.insert(argv.end(), command.begin(), command.end());
  env.push_back("PYTHONPATH=" + stand_in(release));
  r.result = e2e::run(argv, env);
  EXPECT_EQ(r.result.status, 0) << r.result.err;
  auto accounts = e2e::sample_accounts(r.result.out);
  EXPECT_EQ(accounts.size(), 1u) << r.result.out << r.result.err;
  if (!accounts.empty()) r.account = accounts.begin()->second;
  nlohmann::json report = e2e::report_json(r.traces);
  if (!report["processes"].empty()) r.process = report["processes"][0];
  return r;
}

uint64_t calls(const nlohmann::json& process, const std::string& api) {
  return process["events"].contains(api) ? process["events"][api]["calls"].get<uint64_t>() : 0;
}

// PyTorch's counters at exit were recorded, and memtrace's figures agree with them.
void expect_counters_agree(const TracedRun& r) {
  const auto& counters = r.process["pytorch_counters"];
  ASSERT_FALSE(counters.empty()) << r.process.dump();
  for (const auto& c : counters) EXPECT_TRUE(c["agrees"].get<bool>()) << c.dump(1);
}

uint64_t allocated_peak(const TracedRun& r) {
  return e2e::command_json(
      {e2e::kMemtrace, "peak", "--json", "--layer", "allocated", r.traces})["processes"][0]["devices"][0]["peak_bytes"];
}

// 2.1 has no trace tracker and 2.3 hides the class memtrace finds it by: PyTorch's own recorder
// stands in, read at exit and merged into the trace. 2.11: the tracker, live.
class Releases : public ::testing::TestWithParam<std::string> {};

TEST_P(Releases, TheAllocatedLayerIsRecordedAndAgreesWithPyTorch) {
  const std::string release = GetParam();
  TracedRun r = traced("release-" + release, {MEMTRACE_PYTHON, kTrain, "--steps", "3", "--leak"}, {}, release);
  EXPECT_GT(calls(r.process, "torch.alloc"), 0u) << r.process["events"].dump();
  EXPECT_EQ(allocated_peak(r), r.account["max_memory_requested"]);
  expect_counters_agree(r);
  EXPECT_EQ(calls(r.process, "memtrace.mark"), 3u);  // the steps
  std::string notices = r.process["notices"].dump();
  if (release == "torch") {
    EXPECT_FALSE(contains(notices, "own recorder")) << notices;
  } else {
    EXPECT_TRUE(contains(notices, "the allocated layer comes from PyTorch's own recorder")) << notices;
    EXPECT_TRUE(contains(notices, "came from its own recorder, 1 reading merged")) << notices;
    // The readings went into the trace.
    for (const auto& entry : std::filesystem::directory_iterator(r.traces))
      EXPECT_NE(entry.path().extension(), ".pickle") << entry.path();
  }
  if (release != "torch-2.1") {  // with times, the leak is found step by step, with its line
    nlohmann::json leaks = e2e::command_json({e2e::kMemtrace, "leaks", "--json", r.traces});
    ASSERT_EQ(leaks["processes"][0]["growth"].size(), 1u) << leaks.dump(1);
    EXPECT_EQ(leaks["processes"][0]["growth"][0]["location"],
              "torch_train.py:" + std::to_string(e2e::marked_line(kTrain, "leak")) + " in main");
  } else {
    EXPECT_TRUE(contains(notices, "keeps no times in its recorder (2.1)")) << notices;
  }
}

INSTANTIATE_TEST_SUITE_P(Torch, Releases, ::testing::Values("torch", "torch-2.3", "torch-2.1"), [](const auto& info) {
  std::string name = info.param == "torch" ? "newest" : info.param;
  for (char& c : name)
    if (c == '-' || c == '.') c = '_';
  return name;
});

// 2.3 and 2.6 reach cuMemCreate and cuMemMap with dlsym on libcuda.so.1 (c10/cuda/driver_api.cpp):
// the reserved layer has them, and PyTorch's segments agree.
TEST(TorchRecorder, ExpandableSegmentsThroughTheDriversOwnSymbols) {
  TracedRun r = traced("expandable-2.3", {MEMTRACE_PYTHON, kTrain, "--steps", "3"},
                       {"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"}, "torch-2.3");
  EXPECT_GT(calls(r.process, "cuMemMap"), 0u) << r.process["events"].dump();
  EXPECT_GT(calls(r.process, "torch.segment_map"), 0u) << r.process["events"].dump();
  nlohmann::json reserved = e2e::command_json({e2e::kMemtrace, "peak", "--json", r.traces});
  EXPECT_EQ(reserved["processes"][0]["devices"][0]["peak_bytes"], r.account["max_memory_reserved"]);
  expect_counters_agree(r);
}

TEST(TorchRecorder, PyTorchsOwnRecorderOnRequestGivesTheSameFigures) {
  TracedRun live = traced("recorder-live", {MEMTRACE_PYTHON, kTrain, "--steps", "3"});
  TracedRun history =
      traced("recorder-history", {MEMTRACE_PYTHON, kTrain, "--steps", "3"}, {"MEMTRACE_TORCH_RECORDER=history"});
  EXPECT_EQ(allocated_peak(history), allocated_peak(live));
  EXPECT_EQ(calls(history.process, "torch.alloc"), calls(live.process, "torch.alloc"));
  expect_counters_agree(history);
  EXPECT_TRUE(contains(history.process["notices"].dump(), "MEMTRACE_TORCH_RECORDER=history"));
}

TEST(TorchRecorder, AnOutOfMemoryIsReadAndItsCountersRecorded) {
  TracedRun r =
      traced("recorder-oom", {MEMTRACE_PYTHON, kTrain, "--steps", "2", "--oom"}, {"MEMTRACE_TORCH_RECORDER=history"});
  EXPECT_TRUE(r.account["oom_caught"].get<bool>());
  EXPECT_EQ(r.process["events"]["torch.oom"]["failed"], 1u) << r.process["events"].dump();
  EXPECT_TRUE(contains(r.process["notices"].dump(), "2 readings merged")) << r.process["notices"].dump();
  bool oom_counters = false;
  for (const auto& c : r.process["pytorch_counters"]) {
    oom_counters |= c["when"] == "oom";
    EXPECT_TRUE(c["agrees"].get<bool>()) << c.dump(1);
  }
  EXPECT_TRUE(oom_counters) << r.process["pytorch_counters"].dump(1);
}

// requested_bytes is what memtrace's allocated layer counts; allocated_bytes, PyTorch's blocks,
// rounds it up: the report says by how much.
TEST(TorchCounters, TheReportHoldsMemtraceAgainstPyTorchAndShowsTheRounding) {
  TracedRun r = traced("counters", {MEMTRACE_PYTHON, kTrain, "--steps", "3"});
  expect_counters_agree(r);
  const auto& c = r.process["pytorch_counters"][0];
  EXPECT_EQ(c["when"], "exit");
  EXPECT_GT(c["rounding_at_peak_bytes"].get<int64_t>(), 0) << c.dump(1);
  EXPECT_EQ(c["figures"]["requested_bytes.all.peak"], r.account["max_memory_requested"]);
  e2e::Result text = e2e::run({e2e::kMemtrace, "report", r.traces});
  EXPECT_TRUE(contains(text.out,
                       "PyTorch's own counters at exit (torch.cuda.memory_stats): memtrace's figures agree "
                       "to the byte"))
      << text.out;
  EXPECT_TRUE(contains(text.out, "its blocks round the requests up")) << text.out;
  e2e::Result peak = e2e::run({e2e::kMemtrace, "peak", "--layer", "allocated", r.traces});
  EXPECT_TRUE(contains(peak.out, "allocated: the bytes tensors asked for (PyTorch's requested_bytes")) << peak.out;
}

TEST(TorchCounters, PeaksTheProgramResetAreHeldFromTheReset) {
  TracedRun r = traced("reset-peaks", {MEMTRACE_PYTHON, kPaths, "--steps", "3", "--reset-peaks"});
  expect_counters_agree(r);
  EXPECT_TRUE(r.process["pytorch_counters"][0]["reset_seen"].get<bool>());
}

// Steps survive gradients whose data_ptr() raises (sparse) or is 0 (DTensor), and what they are
// is still told from their memory.
class GradientsWithoutStorage : public ::testing::TestWithParam<std::string> {};

TEST_P(GradientsWithoutStorage, StepsAndCategoriesAreRecorded) {
  TracedRun r = traced("gradients" + GetParam(), {MEMTRACE_PYTHON, kPaths, "--steps", "3", GetParam()});
  EXPECT_EQ(calls(r.process, "memtrace.mark"), 3u);
  EXPECT_EQ(calls(r.process, "memtrace.range_push"), calls(r.process, "memtrace.range_pop"));
  nlohmann::json p = e2e::command_json(
      {e2e::kMemtrace, "peak", "--json", "--layer", "allocated", "--by", "category", r.traces})["processes"][0];
  std::map<std::string, uint64_t> bytes;
  for (const auto& c : p["devices"][0]["categories"]) bytes[c["category"]] = c["bytes"];
  EXPECT_GT(bytes["parameter"], 0u) << p.dump(1);
  expect_counters_agree(r);
}

INSTANTIATE_TEST_SUITE_P(Torch, GradientsWithoutStorage, ::testing::Values("--sparse", "--fsdp"),
                         [](const auto& info) { return info.param.substr(2); });

// A MemPool whose allocator reserved its memory at its first call (an arena): its segments follow
// no reservation of PyTorch's own, which says nothing of memtrace's reading; PyTorch's next
// segment confirms it, and the pool's first events are kept until then.
TEST(TorchMemPool, APoolsOwnSegmentsNeitherSilenceTheTrackerNorGetLost) {
  TracedRun r = traced(
      "mempool", {MEMTRACE_PYTHON, kPaths, "--steps", "3", "--mempool", MEMTRACE_SAMPLES_DIR "/libtorch_allocator.so"});
  EXPECT_TRUE(r.process["notices"].empty()) << r.process["notices"].dump();
  EXPECT_GT(calls(r.process, "torch.alloc"), 0u);
  EXPECT_EQ(allocated_peak(r), r.account["max_memory_requested"]);
  expect_counters_agree(r);
}

// torch.compile: the shim's hooks are kept out of what Dynamo traces (torch._dynamo.disable), a
// fullgraph forward compiles, and the compiled steps are still counted.
TEST(TorchCompile, HooksStayOutOfGraphsAndStepsAreCounted) {
  TracedRun r = traced("compile", {MEMTRACE_PYTHON, kPaths, "--steps", "3", "--compile"});
  EXPECT_EQ(r.account["traced_memtrace_frames"], 0) << r.account.dump();
  EXPECT_EQ(calls(r.process, "memtrace.mark"), 3u);
  // The same program without memtrace breaks its graphs as often.
  e2e::Result bare = e2e::run({MEMTRACE_PYTHON, kPaths, "--steps", "3", "--compile"},
                              {"PYTHONPATH=" + stand_in("torch"), "LD_LIBRARY_PATH=" MEMTRACE_SIM_DIR});
  ASSERT_EQ(bare.status, 0) << bare.err;
  auto accounts = e2e::sample_accounts(bare.out);
  ASSERT_EQ(accounts.size(), 1u);
  EXPECT_EQ(accounts.begin()->second["graph_breaks"], r.account["graph_breaks"]);
}

// Inside PyTorch's allocator no frame is read through Python's C API (it allocates, and a garbage
// collection there can free tensors into the same allocator): with MEMTRACE_PYTHON_LAYOUT=0 (the C
// API alone), a tensor allocated holding the GIL, which the C API would give its line, gets none.
TEST(TorchFrames, NoCApiFramesInsidePyTorchsAllocator) {
  TracedRun r =
      traced("holding-gil", {MEMTRACE_PYTHON, kPaths, "--steps", "2", "--holding-gil"}, {"MEMTRACE_PYTHON_LAYOUT=0"});
  EXPECT_TRUE(contains(r.process["notices"].dump(), "MEMTRACE_PYTHON_LAYOUT=0")) << r.process["notices"].dump();
  const uint32_t line = e2e::marked_line(kPaths, "extension");
  size_t extension_allocations = 0;
  for (const nlohmann::json& e : e2e::exported_events(r.dir)) {
    if (e.value("api", "") != "torch.alloc" || e.value("size", 0) != 3u << 18) continue;  // 768 KiB
    ++extension_allocations;
    for (const auto& f : e["stack"])
      EXPECT_FALSE(f.value("kind", "") == "python" && f.value("line", 0u) == line) << e.dump();
  }
  EXPECT_EQ(extension_allocations, 2u);
}

// python -E and -I ignore PYTHONPATH, -S skips site: no sitecustomize, so the injector starts the
// shim itself, on every CPython here.
struct Flagged {
  e2e::Python python;
  std::string flag;
};
void PrintTo(const Flagged& f, std::ostream* out) { *out << f.python.path << " " << f.flag; }

class PythonFlags : public ::testing::TestWithParam<Flagged> {};

TEST_P(PythonFlags, TheShimStartsWithoutSiteOrPythonPath) {
  const std::string dir = e2e::temp_dir("wrapper");
  const std::string wrapper = dir + "/wrapper.py";
  std::ofstream(wrapper) << "import runpy, sys\n"
                            "sys.path.insert(0, '"
                         << stand_in("torch")
                         << "')\n"
                            "sys.argv = sys.argv[1:]\n"
                            "runpy.run_path(sys.argv[0], run_name='__main__')\n";
  TracedRun r = traced("flags", {GetParam().python.path, GetParam().flag, wrapper, kTrain, "--steps", "3"});
  EXPECT_GT(calls(r.process, "torch.alloc"), 0u) << r.process.dump();
  EXPECT_EQ(calls(r.process, "memtrace.mark"), 3u);
  expect_counters_agree(r);
}

// Started where site does not start it, the shim leaves the program's own profile function alone
// (it once waited for imports to end with one of its own), and does not start inside an import
// (the injector's tries that fall there do nothing: with -E and -I, site's own import is under way
// when the interpreter says it is initialized; the program's import here, when the shim did not
// start before it).
TEST_P(PythonFlags, TheShimStartsOutsideImportsAndLeavesTheProfileFunctionAlone) {
  const std::string dir = e2e::temp_dir("no-profile");
  const std::string script = dir + "/script.py", slow = dir + "/slow_import.py";
  std::ofstream(slow) << "import sys\n"
                         "before = '_memtrace_shim' in sys.modules\n"
                         "total = 0\n"
                         "for i in range(3000000):\n"  // safe points for the injector's tries
                         "    total += i\n"
                         "started_inside = not before and '_memtrace_shim' in sys.modules\n";
  std::ofstream(script) << "import sys, time\n"
                           "def mine(frame, event, arg):\n"
                           "    pass\n"
                           "sys.setprofile(mine)\n"
                           "sys.path.insert(0, '"
                        << dir
                        << "')\n"
                           "import slow_import\n"
                           "while '_memtrace_shim' not in sys.modules:\n"
                           "    time.sleep(0.01)\n"
                           "print('started inside the import:', slow_import.started_inside)\n"
                           "print('profile function mine:', sys.getprofile() is mine)\n";
  e2e::Result r = e2e::run(
      {e2e::kMemtrace, "run", "--sim", "-o", dir + "/traces", "--", GetParam().python.path, GetParam().flag, script});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("started inside the import: False"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("profile function mine: True"), std::string::npos) << r.out;
}

std::vector<Flagged> flagged_pythons() {
  std::vector<Flagged> out;
  for (const e2e::Python& p : e2e::readable_pythons())
    for (const char* flag : {"-E", "-I", "-S"}) out.push_back({p, flag});
  return out;
}

INSTANTIATE_TEST_SUITE_P(CPython, PythonFlags, ::testing::ValuesIn(flagged_pythons()), [](const auto& info) {
  return (info.param.python.path.rfind("/usr/", 0) == 0 ? "system_3_" : "pyenv_3_") +
         std::to_string(info.param.python.minor) + "_" + info.param.flag.substr(1);
});
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PythonFlags);

}  // namespace
