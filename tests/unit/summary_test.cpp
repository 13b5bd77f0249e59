// Summaries (memtrace summarize) read in their traces' place: a job of four nodes' summaries gives
// every view its traces give; what a summary keeps comes back whole; a summary that lacks what a
// command asks says how to make one that has it.
#include "memtrace/engine/summary.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zstd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>
#include <vector>

#include "memtrace/engine/trace_set.h"
#include "memtrace/exports/html_report.h"
#include "memtrace/format/run_folder.h"
#include "memtrace/views/views.h"
#include "trace_builder.h"

namespace memtrace::testing {
namespace {

namespace fs = std::filesystem;

std::string scratch(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("memtrace-summary-" + std::to_string(::getpid()) + "-" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

// Node NODE of a job: RANKS ranks, each with steps, sites, growth and a leak.
void write_node(const std::string& dir, int node, int ranks) {
  fs::create_directories(dir);
  for (int r = 0; r < ranks; ++r) {
    const int rank = node * ranks + r;
    TraceBuilder t("pid" + std::to_string(5000 + rank), dir, 5000 + rank, rank);
    uint64_t base = 0x7f0000000000;
    for (int step = 0; step < 4; ++step) {
      t.mark(Api::kNvtxMark, "memtrace.step");
      for (int k = 0; k <= (rank + step) % 4; ++k) {
        uint64_t addr = base + (step * 8 + k) * 0x10000000ull;
        t.alloc(Api::kCudaMalloc, addr, (k + 1 + rank % 3) * kMiB, "layer" + std::to_string(k));
        if (k != 0) t.free(Api::kCudaFree, addr);  // layer0 grows every step: it leaks
      }
    }
    t.finish();
  }
}

std::vector<ProcessAnalysis> analyze(const std::string& path, const AnalysisOptions& options) {
  std::vector<ProcessAnalysis> out;
  std::vector<std::string> warnings;
  std::string error;
  EXPECT_TRUE(analyze_path(path, options, 2, out, warnings, error)) << error;
  return out;
}

// Every view of the job, as JSON, with the job's folder named FOLDER.
std::string views(const std::string& path, const std::string& folder) {
  AnalysisOptions timeline;
  timeline.timeline = true;
  HtmlOptions page;
  page.largest_allocations = 100;
  nlohmann::json all = {
      {"report", to_json(report_view(analyze(path, AnalysisOptions())))},
      {"peak", to_json(peak_view(analyze(path, AnalysisOptions()), PeakOptions()))},
      {"leaks", to_json(leaks_view(analyze(path, AnalysisOptions())))},
      {"frag", to_json(frag_view(analyze(path, timeline)))},
      {"timeline", to_json(timeline_view(analyze(path, timeline), TimeWindow()))},
      {"html", html_data(analyze(path, html_analysis_options(page)))},
  };
  return std::regex_replace(all.dump(1), std::regex(folder), "JOB");
}

std::vector<AnalysisOptions> summarize_options() {
  AnalysisOptions commands;
  commands.timeline = true;
  HtmlOptions page;
  page.largest_allocations = 100;
  return {commands, html_analysis_options(page)};
}

void summarize_all(const std::string& job) {
  std::string error;
  for (const std::string& trace : run_folder::find_traces(job, error)) {
    size_t bytes = 0;
    ASSERT_TRUE(summarize_trace(trace, summarize_options(), bytes, error)) << error;
    EXPECT_GT(bytes, 0u);
  }
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(Summaries, AJobOfFourNodesGivesWhatItsTracesGive) {
  // Each node summarizes its own folder; only the summaries travel to the job's folder.
  std::string traces = scratch("traces"), summaries = scratch("summaries");
  for (int node = 0; node < 4; ++node) write_node(traces + "/node" + std::to_string(node), node, 6);
  summarize_all(traces);
  for (const auto& entry : fs::recursive_directory_iterator(traces)) {
    if (entry.path().extension() != run_folder::kSummaryExtension) continue;
    fs::path to = summaries / fs::relative(entry.path(), traces);
    fs::create_directories(to.parent_path());
    fs::copy_file(entry.path(), to);
  }
  std::vector<ProcessAnalysis> read = analyze(summaries, AnalysisOptions());
  ASSERT_EQ(read.size(), 24u);
  for (size_t i = 0; i < read.size(); ++i) EXPECT_EQ(read[i].report.rank, static_cast<int32_t>(i));
  EXPECT_EQ(views(summaries, summaries), views(traces, traces));
  fs::remove_all(traces);
  fs::remove_all(summaries);
}

TEST(Summaries, WhatASummaryKeepsComesBackWhole) {
  // PyTorch's own snapshots: both layers, categories, PyTorch's counters, fragmentation, OOMs.
  std::string dir = scratch("whole");
  for (const char* name : {"2.1-finetune.pickle", "2.3-attention-backward.pickle", "upto2.0-oom.pickle"}) {
    std::string pickle = dir + "/" + name;
    fs::copy_file(std::string(MEMTRACE_TEST_DATA_DIR) + "/torch/" + name, pickle);
    std::string error;
    size_t bytes = 0;
    ASSERT_TRUE(summarize_trace(pickle, summarize_options(), bytes, error)) << error;
    std::string summary = summary_path_of(pickle);
    std::vector<SummaryEntry> entries;
    for (const AnalysisOptions& options : summarize_options()) {
      SummaryEntry e{options, {}};
      ASSERT_TRUE(read_summary(summary, options, e.analysis, error)) << error;
      e.analysis.report.trace_path = pickle;
      entries.push_back(std::move(e));
      ProcessAnalysis direct;
      ASSERT_TRUE(analyze_process(pickle, options, direct, error));
      EXPECT_EQ(html_data({direct}), html_data({entries.back().analysis})) << name;
      EXPECT_EQ(to_json(report_view({direct})), to_json(report_view({entries.back().analysis}))) << name;
    }
    // Written again from what was read, it is the same file: nothing is lost on the way.
    std::string again = dir + "/again.memsum";
    ASSERT_TRUE(write_summary(again, entries, error)) << error;
    EXPECT_EQ(read_bytes(again), read_bytes(summary)) << name;
  }
  fs::remove_all(dir);
}

TEST(Summaries, ASummaryThatLacksWhatIsAskedSaysHowToMakeOne) {
  std::string dir = scratch("lacks");
  write_node(dir, 0, 1);
  std::string trace = dir + "/pid5000.memtrace", summary = dir + "/pid5000.memsum";
  AnalysisOptions commands;
  commands.timeline = true;
  size_t bytes = 0;
  std::string error;
  ASSERT_TRUE(summarize_trace(trace, {commands}, bytes, error)) << error;

  ProcessAnalysis out;
  AnalysisOptions other;
  other.top_sites = 5;
  EXPECT_FALSE(read_summary(summary, other, out, error));
  EXPECT_NE(error.find("memtrace summarize --by user --top 5"), std::string::npos) << error;
  HtmlOptions page;
  EXPECT_FALSE(read_summary(summary, html_analysis_options(page), out, error));
  EXPECT_NE(error.find("memtrace summarize --html"), std::string::npos) << error;

  // Beside its trace, a summary is not read: the trace answers any question.
  std::vector<std::string> found = run_folder::find_traces_and_summaries(dir, error);
  EXPECT_EQ(found, std::vector<std::string>{trace});
  fs::remove(trace);
  found = run_folder::find_traces_and_summaries(dir, error);
  EXPECT_EQ(found, std::vector<std::string>{summary});
  EXPECT_TRUE(run_folder::find_traces(dir, error).empty());
  EXPECT_NE(error.find("needs the events"), std::string::npos) << error;
  EXPECT_FALSE(open_trace(summary, error));
  EXPECT_NE(error.find("is a summary of a trace"), std::string::npos) << error;

  // Cut, damaged, or of another layout: said, never a crash.
  std::string whole = read_bytes(summary);
  for (std::string bad : {whole.substr(0, whole.size() / 2), whole.substr(0, 8) + std::string(40, 'x'),
                          std::string(whole).replace(7, 1, "\x07")}) {
    std::ofstream(summary, std::ios::binary | std::ios::trunc) << bad;
    EXPECT_FALSE(read_summary(summary, commands, out, error));
    EXPECT_NE(error.find(summary), std::string::npos) << error;
  }
  fs::remove_all(dir);
}

// What report, peak (its reserved layer), leaks and check answer for P.
std::string answers(std::vector<ProcessAnalysis> p) {
  CheckLimits limits;
  limits.max_peak = 1;
  limits.max_leaked = 1;
  return nlohmann::json{{"report", to_json(report_view(std::vector<ProcessAnalysis>(p)))},
                        {"peak", to_json(peak_view(p, PeakOptions()))},
                        {"leaks", to_json(leaks_view(p))},
                        {"check", to_json(check(p, limits, nullptr))}}
      .dump(1);
}

// peak, leaks, report, check and timeline ask for no fragmentation (AnalysisOptions::fragmentation):
// their answers are the same without it, from the snapshot and from its summary, which keeps it for frag.
TEST(Summaries, CommandsThatShowNoFragmentationAreTheSameWithoutIt) {
  std::string dir = scratch("no-frag");
  for (const char* name : {"2.1-finetune.pickle", "2.3-attention-backward.pickle", "upto2.0-oom.pickle"}) {
    std::string pickle = dir + "/" + name;
    fs::copy_file(std::string(MEMTRACE_TEST_DATA_DIR) + "/torch/" + name, pickle);
    AnalysisOptions with, without;
    without.fragmentation = false;
    std::string error;
    ProcessAnalysis full, lean, from_summary;
    ASSERT_TRUE(analyze_process(pickle, with, full, error)) << error;
    ASSERT_TRUE(analyze_process(pickle, without, lean, error)) << error;
    EXPECT_TRUE(full.has_heaps && !full.fragmentation.empty()) << name;
    EXPECT_TRUE(!lean.has_heaps && lean.fragmentation.empty()) << name;
    EXPECT_EQ(answers({full}), answers({lean})) << name;
    size_t bytes = 0;
    ASSERT_TRUE(summarize_trace(pickle, summarize_options(), bytes, error)) << error;
    ASSERT_TRUE(read_summary(summary_path_of(pickle), without, from_summary, error)) << error;
    from_summary.report.trace_path = pickle;
    EXPECT_TRUE(from_summary.fragmentation.empty()) << name;
    EXPECT_EQ(answers({lean}), answers({from_summary})) << name;
    // timeline draws memory over time, not the free space inside the heaps.
    with.timeline = without.timeline = true;
    ASSERT_TRUE(analyze_process(pickle, with, full, error)) << error;
    ASSERT_TRUE(analyze_process(pickle, without, lean, error)) << error;
    EXPECT_FALSE(full.free_in_heaps.empty()) << name;
    EXPECT_EQ(to_json(timeline_view({full}, TimeWindow())).dump(1),
              to_json(timeline_view({lean}, TimeWindow())).dump(1))
        << name;
  }
  fs::remove_all(dir);
}

// Only peak (--layer allocated, --by category), explain and summaries ask for the blocks'
// categories (AnalysisOptions::categories): without them every other answer is the same, and
// whether the trace tells categories is still known; a summary keeps them for peak.
TEST(Summaries, CommandsThatShowNoCategoriesAreTheSameWithoutThem) {
  std::string dir = scratch("no-categories");
  {
    TraceBuilder t("pid7", dir, 7);
    const uint64_t segment = 0x7f0000000000;
    t.alloc(Api::kCudaMalloc, segment, 64 * kMiB, "segment");
    t.alloc(Api::kTorchAlloc, segment, 8 * kMiB, "weights");
    t.mark(Api::kTorchCategory, "parameter", segment);
    t.mark(Api::kNvtxMark, "memtrace.step");
    t.alloc(Api::kTorchAlloc, segment + 8 * kMiB, 16 * kMiB, "forward");
    t.mark(Api::kShimRangePush, "backward");
    t.alloc(Api::kTorchAlloc, segment + 24 * kMiB, 8 * kMiB, "grads");
    t.free(Api::kTorchFreeCompleted, segment + 8 * kMiB);
    t.mark(Api::kShimRangePop, "backward");
    t.finish();
  }
  AnalysisOptions with, without;
  without.categories = false;
  PeakOptions by_category;
  by_category.by_category = true;
  std::string error, trace = dir + "/pid7.memtrace";
  ProcessAnalysis full, lean, from_summary;
  ASSERT_TRUE(analyze_process(trace, with, full, error)) << error;
  ASSERT_TRUE(analyze_process(trace, without, lean, error)) << error;
  ASSERT_EQ(full.allocated.devices.size(), 1u);
  ASSERT_EQ(lean.allocated.devices.size(), 1u);
  EXPECT_TRUE(full.categories_known && lean.categories_known);
  std::string shown = to_json(peak_view({full}, by_category)).dump();
  for (const char* category : {"parameter", "activation"})
    EXPECT_NE(shown.find(category), std::string::npos) << category << " in " << shown;
  EXPECT_TRUE(lean.allocated.devices[0].peak_categories.empty());
  EXPECT_EQ(answers({full}), answers({lean}));

  size_t bytes = 0;
  ASSERT_TRUE(summarize_trace(trace, summarize_options(), bytes, error)) << error;
  ASSERT_TRUE(read_summary(summary_path_of(trace), without, from_summary, error)) << error;
  from_summary.report.trace_path = trace;
  EXPECT_TRUE(from_summary.categories_known);
  EXPECT_TRUE(from_summary.allocated.devices.at(0).peak_categories.empty());
  EXPECT_EQ(answers({lean}), answers({from_summary}));
  ASSERT_TRUE(read_summary(summary_path_of(trace), with, from_summary, error)) << error;
  EXPECT_EQ(to_json(peak_view({from_summary}, by_category)).dump(), shown);
  // A summary made without them does not stand in for peak --by category.
  ASSERT_TRUE(summarize_trace(trace, {without}, bytes, error)) << error;
  EXPECT_FALSE(read_summary(summary_path_of(trace), with, from_summary, error));
  fs::remove_all(dir);
}

// A crafted summary: a few kilobytes of zstd that unpack to a hundred million MessagePack values
// (a 3.4 KB summary grew past 3.3 GB, then std::bad_alloc escaped). The reader counts the values
// before it builds any, and stops at its bound with one sentence.
TEST(Summaries, ACraftedSummaryStopsAtItsBoundsBeforeTakingMemory) {
  std::string dir = scratch("crafted");
  write_node(dir, 0, 1);
  std::string trace = dir + "/pid5000.memtrace", summary = dir + "/pid5000.memsum";
  AnalysisOptions commands;
  size_t bytes = 0;
  std::string error;
  ASSERT_TRUE(summarize_trace(trace, {commands}, bytes, error)) << error;
  // The file: magic, then the entry's options, analysis and timeline, each after its size.
  std::string file = read_bytes(summary), head = file.substr(0, 8);
  auto take = [&file](size_t& at) {
    uint64_t size = 0;
    for (int i = 0; i < 8; ++i) size |= uint64_t(static_cast<unsigned char>(file[at + i])) << (8 * i);
    std::string part = file.substr(at, 8 + size);
    at += 8 + size;
    return part;
  };
  size_t at = 8;
  std::string options = take(at);
  take(at);
  std::string timeline = take(at);
  auto sized = [](const std::string& part) {
    std::string out;
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(uint64_t(part.size()) >> (8 * i)));
    return out + part;
  };
  auto packed = [](const std::string& msgpack) {
    std::string out(ZSTD_compressBound(msgpack.size()), '\0');
    out.resize(ZSTD_compress(out.data(), out.size(), msgpack.data(), msgpack.size(), 19));
    return out;
  };
  const uint32_t count = 100'000'000;
  std::string nils = {'\xdd', char(count >> 24), char(count >> 16), char(count >> 8), char(count)};  // array 32
  nils.append(count, '\xc0');
  std::string deep(100, '\x91');  // arrays of one, nested
  deep.push_back('\xc0');
  for (const std::string& analysis : {nils, deep}) {
    const std::string crafted = head + options + sized(packed(analysis)) + timeline;
    EXPECT_LT(crafted.size(), 8u << 10) << "kilobytes on disk";
    std::ofstream(summary, std::ios::binary | std::ios::trunc) << crafted;
    ProcessAnalysis out;
    EXPECT_FALSE(read_summary(summary, commands, out, error));
    EXPECT_NE(error.find(summary + " is a damaged summary (it holds more than the 256 MiB, 8388608 values or 64 "
                                   "levels of nesting a summary may hold)"),
              std::string::npos)
        << error;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace memtrace::testing
