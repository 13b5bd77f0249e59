// The relocatable bundle (scripts/bundle), made from this build and run from a copy in another
// folder, with nothing of the build tree on any path: memtrace records and reports, finds the
// libraries it brought (lib/deps, through $ORIGIN), and the GPU check's plumbing (check.sh --sim)
// holds every figure against the stand-in PyTorch's own.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

#include "harness.h"

namespace {

namespace fs = std::filesystem;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class Bundle : public ::testing::Test {
 protected:
  void SetUp() override {
    if (e2e::kSanitized) GTEST_SKIP() << e2e::kNotShippedWhenSanitized;
  }
};

TEST_F(Bundle, RunsFromACopyInAnotherFolder) {
  const std::string dir = e2e::temp_dir("bundle");
  e2e::Result made =
      e2e::run({MEMTRACE_SOURCE_DIR "/scripts/bundle", "--from", MEMTRACE_BUILD_DIR, dir + "/made/memtrace"});
  ASSERT_EQ(made.status, 0) << made.out << made.err;
  fs::copy(dir + "/made", dir + "/elsewhere", fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  fs::remove_all(dir + "/made");
  const std::string memtrace = dir + "/elsewhere/memtrace/bin/memtrace";

  e2e::Result ldd = e2e::run({"/usr/bin/ldd", memtrace});
  ASSERT_EQ(ldd.status, 0) << ldd.err;
  for (const char* lib : {"libprotobuf", "libzstd", "libdw"})
    if (contains(ldd.out, lib)) {
      size_t at = ldd.out.find(lib);
      std::string line = ldd.out.substr(at, ldd.out.find('\n', at) - at);
      EXPECT_TRUE(contains(line, dir + "/elsewhere/memtrace/")) << line;  // the bundle's own
    }

  e2e::Result run = e2e::run({"/usr/bin/env", "-u", "LD_LIBRARY_PATH", memtrace, "run", "--sim", "-o", dir + "/traces",
                              "--", e2e::sample_path("train_loop"), "--steps", "3"},
                             {"MEMTRACE_SIM_LEDGER=" + dir + "/ledger-%p.txt"});
  ASSERT_EQ(run.status, 0) << run.err;
  e2e::Result peak = e2e::run({memtrace, "peak", "--json", dir + "/traces"});
  ASSERT_EQ(peak.status, 0) << peak.err;
  uint64_t recorded = nlohmann::json::parse(peak.out)["processes"][0]["devices"][0]["peak_bytes"];
  EXPECT_EQ(recorded, e2e::read_ledgers(dir).begin()->second.peak.at(0));

  // As docs/install.md gives it: the bundle brings the stand-in PyTorch --sim runs on (a CPU-only
  // PyTorch installed is passed over); the traces are kept.
  e2e::Result check =
      e2e::run({"/usr/bin/env", "-u", "PYTHONPATH", dir + "/elsewhere/memtrace/samples/gpu/check.sh", "--sim"},
               {"PYTHON=" MEMTRACE_PYTHON, "MEMTRACE_CHECK_DIR=" + dir + "/check"});
  EXPECT_EQ(check.status, 0) << check.out << check.err;
  EXPECT_TRUE(contains(check.out, "the traces are in " + dir + "/check/")) << check.out;
  EXPECT_EQ(e2e::run({memtrace, "leaks", dir + "/check/leak"}).status, 0);
  std::smatch held;
  ASSERT_TRUE(std::regex_search(check.out, held, std::regex("([0-9]+) of ([0-9]+) checks hold"))) << check.out;
  EXPECT_EQ(held[1], held[2]) << check.out;
  EXPECT_GE(std::stoi(held[2]), 26) << "the CUPTI, --verify, static-runtime, graph or sharing rows are missing: "
                                    << check.out;
  EXPECT_TRUE(contains(check.out, "graph_memory: reserved by graphs at the peak")) << check.out;
  EXPECT_TRUE(contains(check.out, "graph_nodes (")) << check.out;
  EXPECT_TRUE(contains(check.out, "default: owners at the peak (")) << check.out;
  EXPECT_TRUE(contains(check.out, "default: this process at its most by NVML")) << check.out;
  EXPECT_TRUE(contains(check.out, "backends: CUDA calls per API, preload / cupti / auto")) << check.out;
  EXPECT_TRUE(contains(check.out, "async: exit status and account, with memtrace and without")) << check.out;
}

// The injector carries its own C++ runtime but shares the program's unwinder (libgcc_s): an
// exception the program's C++ runtime throws and memtrace catches is unwound by one unwinder, whose
// context memtrace's copy of the personality routine then reads right. A private copy of the
// unwinder aborted the program there.
TEST_F(Bundle, TheInjectorSharesTheProgramsUnwinder) {
  e2e::Result needed = e2e::run({"/usr/bin/readelf", "-d", MEMTRACE_INJECTOR});
  ASSERT_EQ(needed.status, 0) << needed.err;
  EXPECT_TRUE(contains(needed.out, "[libgcc_s.so.1]")) << needed.out;
  EXPECT_FALSE(contains(needed.out, "[libstdc++")) << needed.out;  // its C++ runtime is inside it
  e2e::Result defined = e2e::run({"/usr/bin/nm", "--defined-only", MEMTRACE_INJECTOR});
  EXPECT_FALSE(contains(defined.out, " _Unwind_RaiseException")) << "the injector has an unwinder of its own";
}

// PyTorch refusing the tracker (the cudaMallocAsync backend's attach throws; a native allocator's
// that throws) leaves the program as it is without memtrace, from the bundle GPU machines get.
TEST_F(Bundle, APyTorchThatRefusesTheTrackerRunsAsWithoutMemtrace) {
  const std::string dir = e2e::temp_dir("bundle-refusal");
  e2e::Result made = e2e::run({MEMTRACE_SOURCE_DIR "/scripts/bundle", "--from", MEMTRACE_BUILD_DIR, dir + "/memtrace"});
  ASSERT_EQ(made.status, 0) << made.out << made.err;
  const std::string memtrace = dir + "/memtrace/bin/memtrace";
  const std::string script = e2e::python_sample_path("torch_train.py");
  const std::string stand_in = "PYTHONPATH=" MEMTRACE_SIM_DIR "/torch/site-packages";
  for (const auto& [env, says] : std::vector<std::pair<std::string, std::string>>{
           {"PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync", "cudaMallocAsync backend"},
           {"SIM_TORCH_ATTACH_THROWS=1", "refused the tracker"}}) {
    e2e::Result bare = e2e::run({MEMTRACE_PYTHON, script, "--steps", "3"},
                                {env, stand_in, "LD_LIBRARY_PATH=" + dir + "/memtrace/lib/sim"});
    ASSERT_EQ(bare.status, 0) << env << ": " << bare.err;
    e2e::Result traced = e2e::run(
        {memtrace, "run", "--sim", "-o", dir + "/traces-" + says, "--", MEMTRACE_PYTHON, script, "--steps", "3"},
        {env, stand_in});
    EXPECT_EQ(traced.status, bare.status) << env << ": " << traced.err;
    auto without = e2e::sample_accounts(bare.out), with = e2e::sample_accounts(traced.out);
    ASSERT_EQ(with.size(), 1u) << env << ": " << traced.out << traced.err;
    nlohmann::json a = without.begin()->second, b = with.begin()->second;
    for (const char* varies : {"pid", "step_ms"}) a.erase(varies), b.erase(varies);
    EXPECT_EQ(a, b) << env;
    e2e::Result report = e2e::run({memtrace, "report", dir + "/traces-" + says});
    EXPECT_TRUE(contains(report.out, says)) << env << ": " << report.out;
  }
}

}  // namespace
