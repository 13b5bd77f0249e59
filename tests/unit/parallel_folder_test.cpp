// A folder's processes analysed at once (-j): every view the same as one by one, in rank order;
// a trace that cannot be read named as it would be one by one.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "memtrace/engine/trace_set.h"
#include "memtrace/views/views.h"
#include "trace_builder.h"

namespace memtrace::testing {
namespace {

namespace fs = std::filesystem;

// A job of PROCESSES ranks (the last few without a rank), written in DIR under names whose order
// is not the ranks' order, each with its own peak, sites and leak.
void write_job(const std::string& dir, int processes) {
  for (int i = 0; i < processes; ++i) {
    int32_t pid = 1000 + (i * 7919) % processes;  // names in an order of their own
    std::optional<int32_t> rank;
    if (i < processes - 3) rank = processes - 4 - i;
    TraceBuilder t("pid" + std::to_string(pid), dir, pid, rank);
    t.mark(Api::kNvtxMark, "memtrace.step");
    uint64_t base = 0x7f0000000000;
    for (int k = 0; k <= i % 5; ++k)
      t.alloc(Api::kCudaMalloc, base + k * 0x10000000, (k + 1 + i) * kMiB, "layer" + std::to_string(k));
    for (int k = 0; k <= i % 5; ++k)
      if (k != 0 || i % 3 != 0) t.free(Api::kCudaFree, base + k * 0x10000000);  // every third leaks one
    t.mark(Api::kNvtxMark, "memtrace.step");
    t.finish();
  }
}

std::vector<ProcessAnalysis> analyze(const std::string& dir, unsigned jobs) {
  std::vector<ProcessAnalysis> out;
  std::vector<std::string> warnings;
  std::string error;
  EXPECT_TRUE(analyze_path(dir, AnalysisOptions(), jobs, out, warnings, error)) << error;
  EXPECT_TRUE(warnings.empty());
  return out;
}

std::string scratch(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("memtrace-parallel-" + std::to_string(::getpid()) + "-" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

TEST(ParallelFolder, TwoHundredFiftySixProcessesGiveWhatOneByOneGives) {
  std::string dir = scratch("job");
  write_job(dir, 256);
  std::vector<ProcessAnalysis> one = analyze(dir, 1), many = analyze(dir, 8);
  ASSERT_EQ(one.size(), 256u);
  ASSERT_EQ(many.size(), 256u);
  for (size_t i = 0; i < 253; ++i) ASSERT_EQ(many[i].report.rank, static_cast<int32_t>(i)) << "ranks in order";
  EXPECT_EQ(to_json(leaks_view(one)), to_json(leaks_view(many)));
  EXPECT_EQ(to_json(peak_view(one, PeakOptions())), to_json(peak_view(many, PeakOptions())));
  EXPECT_EQ(to_json(frag_view(one)), to_json(frag_view(many)));
  nlohmann::json a = to_json(report_view(std::move(one))), b = to_json(report_view(std::move(many)));
  EXPECT_EQ(a, b);
  EXPECT_EQ(a["processes"].size(), 256u);
  fs::remove_all(dir);
}

TEST(ParallelFolder, ATraceThatCannotBeReadIsNamedAsOneByOne) {
  std::string dir = scratch("damaged");
  write_job(dir, 40);
  for (const char* name : {"pid1010.memtrace", "pid1030.memtrace"}) std::ofstream(dir + "/" + name) << "not a trace";
  for (unsigned jobs : {1u, 2u, 16u}) {
    std::vector<ProcessAnalysis> out;
    std::vector<std::string> warnings;
    std::string error;
    EXPECT_FALSE(analyze_path(dir, AnalysisOptions(), jobs, out, warnings, error));
    EXPECT_NE(error.find("pid1010.memtrace"), std::string::npos) << jobs << " jobs: " << error;
    EXPECT_TRUE(out.empty());
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace memtrace::testing
