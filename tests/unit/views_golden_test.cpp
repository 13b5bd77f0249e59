// Every view's text and JSON, and the text exports, on small hand-built traces, held byte for byte
// against the files in tests/unit/golden (reviewed once when written, then compared, as memray
// keeps its reporters' snapshots). A change meant to change an output rewrites them:
//   MEMTRACE_UPDATE_GOLDEN=1 build/bin/unit_tests --gtest_filter='ViewsGolden.*'
// and the diff of tests/unit/golden is reviewed with the change.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "memtrace/estimate/explain.h"
#include "memtrace/exports/export_jsonl.h"
#include "memtrace/exports/export_profiles.h"
#include "memtrace/views/verify.h"
#include "memtrace/views/views.h"
#include "trace_builder.h"

namespace {

using namespace memtrace;
using memtrace::testing::kMiB;
using memtrace::testing::TraceBuilder;
namespace fs = std::filesystem;

class ViewsGolden : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / ("memtrace-golden-" + std::to_string(::getpid()))).string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A training loop of STEPS steps: weights kept, activations freed every step, LEAK bytes a step
  // kept by log_metrics, then a request the device cannot meet. CUPTI saw the weights and the
  // first step's activations only.
  std::string train(const std::string& name, uint64_t leak, int steps = 4) {
    TraceBuilder t(name, dir_);
    t.alloc(Api::kCudaMalloc, 0x10000000, 64 * kMiB, "load_weights");
    t.cupti_record(0x10000000, 64 * kMiB);
    for (int step = 0; step < steps; ++step) {
      t.mark(Api::kNvtxRangePush, "train_step");
      t.alloc(Api::kCudaMalloc, 0x20000000, 8 * kMiB, "forward");
      if (step == 0) t.cupti_record(0x20000000, 8 * kMiB);
      t.alloc(Api::kCudaMalloc, 0x30000000 + static_cast<uint64_t>(step) * 16 * kMiB, leak, "log_metrics");
      t.free(Api::kCudaFree, 0x20000000);
      t.mark(Api::kNvtxRangePop, "");
      t.mark(Api::kNvtxMark, "memtrace.step");
    }
    t.alloc(Api::kCudaMalloc, 0, kMiB << 10, "forward", 0, kOutOfMemoryResult);
    return t.finish();
  }

  // An allocator's 32 MiB segment described as a heap, 16 blocks of 2 MiB, every other one freed,
  // and two requests that do not fit in the holes.
  std::string heaps(const std::string& name) {
    TraceBuilder t(name, dir_);
    const uint64_t seg = 0x40000000;
    t.alloc(Api::kCudaMalloc, seg, 32 * kMiB, "segment");
    t.alloc(Api::kNvtxMemHeapRegister, seg, 32 * kMiB, "segment", seg);
    for (uint64_t i = 0; i < 16; ++i)
      t.alloc(Api::kNvtxMemRegionRegister, seg + i * 2 * kMiB, 2 * kMiB, i % 4 ? "block" : "cache", seg);
    for (uint64_t i = 0; i < 16; i += 2) t.free(Api::kNvtxMemRegionUnregister, seg + i * 2 * kMiB);
    t.alloc(Api::kCudaMalloc, 0, 32 * kMiB, "segment", 0, kOutOfMemoryResult);
    t.free(Api::kNvtxMemRegionUnregister, seg + 2 * kMiB);
    t.alloc(Api::kCudaMalloc, 0, 32 * kMiB, "segment", 0, kOutOfMemoryResult);
    return t.finish();
  }

  std::vector<ProcessAnalysis> analyze(const std::string& path, AnalysisOptions options = {}) {
    std::vector<ProcessAnalysis> out(1);
    std::string error;
    EXPECT_TRUE(analyze_process(path, options, out[0], error)) << error;
    return out;
  }

  // What an export writes to a file, as text.
  template <typename Export>
  std::string exported(Export&& write) {
    std::string path = dir_ + "/export.out";
    std::FILE* f = std::fopen(path.c_str(), "w");
    std::vector<std::string> warnings;
    std::string error;
    EXPECT_TRUE(write(f, warnings, error)) << error;
    std::fclose(f);
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    fs::remove(path);
    return text.str();
  }

  // Holds OUTPUT (its folder named <dir>) against tests/unit/golden/NAME, or writes it there.
  void golden(const std::string& name, std::string output) {
    for (size_t at; (at = output.find(dir_)) != std::string::npos;) output.replace(at, dir_.size(), "<dir>");
    const std::string path = std::string(MEMTRACE_GOLDEN_DIR) + "/" + name;
    if (std::getenv("MEMTRACE_UPDATE_GOLDEN")) {
      std::ofstream(path, std::ios::binary) << output;
      return;
    }
    std::ifstream in(path, std::ios::binary);
    ASSERT_TRUE(in) << path << " is missing: MEMTRACE_UPDATE_GOLDEN=1 writes it";
    std::stringstream expected;
    expected << in.rdbuf();
    EXPECT_EQ(expected.str(), output) << "differs from " << path;
  }
  void golden_json(const std::string& name, const nlohmann::json& doc) { golden(name, doc.dump(2) + "\n"); }

  std::string dir_;
};

TEST_F(ViewsGolden, Report) {
  auto processes = analyze(train("train", 2 * kMiB));
  ReportView view = report_view(std::move(processes));
  golden("report.txt", to_text(view));
  golden_json("report.json", to_json(view));
}

TEST_F(ViewsGolden, Peak) {
  auto train_run = analyze(train("train", 2 * kMiB));
  PeakView reserved = peak_view(train_run, PeakOptions{});
  golden("peak.txt", to_text(reserved));
  golden_json("peak.json", to_json(reserved));
  PeakOptions allocated;
  allocated.layer = Layer::kAllocated;
  PeakView heap_peak = peak_view(analyze(heaps("heaps")), allocated);
  golden("peak-allocated.txt", to_text(heap_peak));
  golden_json("peak-allocated.json", to_json(heap_peak));
}

TEST_F(ViewsGolden, Leaks) {
  LeaksView view = leaks_view(analyze(train("train", 2 * kMiB)));
  golden("leaks.txt", to_text(view));
  golden_json("leaks.json", to_json(view));
}

TEST_F(ViewsGolden, Frag) {
  FragView view = frag_view(analyze(heaps("heaps")));
  golden("frag.txt", to_text(view));
  golden_json("frag.json", to_json(view));
}

TEST_F(ViewsGolden, Timeline) {
  AnalysisOptions options;
  options.timeline = true;
  TimelineView view = timeline_view(analyze(train("train", 2 * kMiB), options), TimeWindow{});
  golden("timeline.txt", to_text(view, 40));
  golden_json("timeline.json", to_json(view));
  golden("timeline.csv", to_csv(view));
  golden("timeline.svg", to_svg(view));
  TimeWindow steps;
  steps.from.step = 1;
  steps.to.step = 2;
  golden("timeline-steps.txt", to_text(timeline_view(analyze(train("train", 2 * kMiB), options), steps), 40));
}

TEST_F(ViewsGolden, Diff) {
  DiffView view = diff_view(analyze(train("base", kMiB)), analyze(train("next", 4 * kMiB)), SiteGrouping::kUser);
  golden("diff.txt", to_text(view));
  golden_json("diff.json", to_json(view));
}

TEST_F(ViewsGolden, Check) {
  CheckLimits limits;
  limits.max_peak = 64 * kMiB;
  limits.max_leaked = 1024 * kMiB;
  limits.max_growth_per_step = kMiB;
  CheckResult result = check(analyze(train("train", 2 * kMiB)), limits, nullptr);
  golden("check.txt", to_text(result));
  golden_json("check.json", to_json(result));
  golden("check.junit.xml", check_junit(result));
}

TEST_F(ViewsGolden, Verify) {
  VerifyView view;
  std::string error;
  ASSERT_TRUE(verify_trace(train("train", 2 * kMiB), 10, view.processes.emplace_back(), error)) << error;
  golden("verify.txt", to_text(view));
  golden_json("verify.json", to_json(view));
}

TEST_F(ViewsGolden, Exports) {
  const std::vector<std::string> traces = {train("train", 2 * kMiB)};
  golden("export.jsonl", exported([&](std::FILE* f, std::vector<std::string>& warnings, std::string& error) {
           return export_jsonl(traces, f, false, warnings, error);
         }));
  golden("export-chrome.json", exported([&](std::FILE* f, std::vector<std::string>& warnings, std::string& error) {
           return export_chrome(traces, f, warnings, error);
         }));
  golden("export.folded", export_folded(analyze(traces[0]), true));
}

}  // namespace
