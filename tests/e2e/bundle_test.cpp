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

TEST(Bundle, RunsFromACopyInAnotherFolder) {
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

  e2e::Result check = e2e::run({dir + "/elsewhere/memtrace/samples/gpu/check.sh", "--sim"},
                               {"PYTHONPATH=" MEMTRACE_SIM_DIR "/torch/site-packages", "PYTHON=" MEMTRACE_PYTHON});
  EXPECT_EQ(check.status, 0) << check.out << check.err;
  std::smatch held;
  ASSERT_TRUE(std::regex_search(check.out, held, std::regex("([0-9]+) of ([0-9]+) checks hold"))) << check.out;
  EXPECT_EQ(held[1], held[2]) << check.out;
  EXPECT_GE(std::stoi(held[2]), 26) << "the CUPTI, --verify, static-runtime, graph or sharing rows are missing: "
                                    << check.out;
  EXPECT_TRUE(contains(check.out, "graph_memory: reserved by graphs at the peak")) << check.out;
}

}  // namespace
