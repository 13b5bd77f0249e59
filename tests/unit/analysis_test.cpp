// The offline analyses on hand-built traces with known answers: steps and growth, fragmentation
// of a hand-built segment layout, peaks per layer, the timeline, check and diff.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>

#include "memtrace/engine/process_analysis.h"
#include "memtrace/engine/timeline.h"
#include "memtrace/exports/html_report.h"
#include "memtrace/format/trace_writer.h"
#include "memtrace/views/report_render.h"
#include "memtrace/views/views.h"
#include "trace_builder.h"

namespace {

using namespace memtrace;
using memtrace::testing::kMiB;
using memtrace::testing::TraceBuilder;

TEST(Steps, GrowthPerStepIsSeparatedFromMemoryKept) {
  TraceBuilder t("growth");
  t.alloc(Api::kCudaMalloc, 0x10000000, 64 * kMiB, "load_weights");
  for (uint64_t step = 0; step < 8; ++step) {
    t.mark(Api::kNvtxRangePush, "train_step");
    t.alloc(Api::kCudaMalloc, 0x20000000, 8 * kMiB, "forward");
    t.alloc(Api::kCudaMalloc, 0x30000000 + step * kMiB, 4096, "accumulate_loss");  // never freed
    t.free(Api::kCudaFree, 0x20000000);
    t.mark(Api::kNvtxRangePop, "");
    t.mark(Api::kNvtxMark, "memtrace.step");
  }
  ProcessAnalysis a = t.analyze();
  EXPECT_EQ(a.step_starts.size(), 8u);
  ASSERT_EQ(a.growth.size(), 1u);
  EXPECT_EQ(a.growth[0].location, "accumulate_loss at app.cpp:10");
  EXPECT_EQ(a.growth[0].bytes_per_step, 4096u);
  EXPECT_EQ(a.growth[0].first_step, 0u);
  EXPECT_EQ(a.growth[0].steps_rising, 8u);
  // Live at the end: the weights (kept) and the losses (growing).
  ASSERT_EQ(a.report.devices.size(), 1u);
  EXPECT_EQ(a.report.devices[0].live_at_exit_bytes, 64 * kMiB + 8 * 4096);
  nlohmann::json leaks = to_json(leaks_view({a}));
  nlohmann::json sites = leaks["processes"][0]["devices"][0]["sites"];
  ASSERT_EQ(sites.size(), 2u);
  EXPECT_EQ(sites[0]["location"], "load_weights at app.cpp:10");
  EXPECT_EQ(sites[0]["kind"], "kept");
  EXPECT_EQ(sites[1]["kind"], "growing");
  // The ranges are phases: the peak fell in one.
  EXPECT_EQ(a.ranges.size(), 8u);
  EXPECT_EQ(a.report.devices[0].peak_phase, "train_step");
}

TEST(Steps, ARegexNamesTheStepAndALeakStartingLateSaysWhen) {
  TraceBuilder t("regex");
  for (uint64_t step = 0; step < 10; ++step) {
    t.mark(Api::kNvtxRangeStart, "iteration " + std::to_string(step), step + 1);
    if (step >= 4) t.alloc(Api::kCudaMalloc, 0x30000000 + step * kMiB, 2 * kMiB, "cache_activations");
    t.mark(Api::kNvtxRangeEnd, "", step + 1);
  }
  AnalysisOptions options;
  EXPECT_TRUE(t.analyze(options).step_starts.empty());  // the default names no step here
  TraceBuilder u("regex2");
  for (uint64_t step = 0; step < 10; ++step) {
    u.mark(Api::kNvtxRangeStart, "iteration " + std::to_string(step), step + 1);
    if (step >= 4) u.alloc(Api::kCudaMalloc, 0x30000000 + step * kMiB, 2 * kMiB, "cache_activations");
    u.mark(Api::kNvtxRangeEnd, "", step + 1);
  }
  options.step_pattern = "iteration [0-9]+";
  ProcessAnalysis a = u.analyze(options);
  EXPECT_EQ(a.step_starts.size(), 10u);
  ASSERT_EQ(a.growth.size(), 1u);
  // Step n is what follows the n-th marker: here each range's start, so "iteration 4" is step 5.
  EXPECT_EQ(a.growth[0].first_step, 5u);
  EXPECT_EQ(a.growth[0].steps_rising, 5u);
}

TEST(Steps, MemoryThatComesAndGoesIsNotGrowth) {
  TraceBuilder t("flat");
  for (uint64_t step = 0; step < 6; ++step) {
    t.alloc(Api::kCudaMalloc, 0x20000000, (step % 2 + 1) * kMiB, "forward");
    t.mark(Api::kNvtxMark, "memtrace.step");
    t.free(Api::kCudaFree, 0x20000000);
  }
  EXPECT_TRUE(t.analyze().growth.empty());
}

// A segment of 32 MiB, described as a heap; 16 blocks of 2 MiB; every other one freed.
TEST(Fragmentation, HandBuiltSegmentLayout) {
  TraceBuilder t("frag");
  const uint64_t seg = 0x40000000;
  t.alloc(Api::kCudaMalloc, seg, 32 * kMiB, "segment");
  t.alloc(Api::kNvtxMemHeapRegister, seg, 32 * kMiB, "segment", seg);
  for (uint64_t i = 0; i < 16; ++i) t.alloc(Api::kNvtxMemRegionRegister, seg + i * 2 * kMiB, 2 * kMiB, "block", seg);
  for (uint64_t i = 0; i < 16; i += 2) t.free(Api::kNvtxMemRegionUnregister, seg + i * 2 * kMiB);
  // 16 MiB free in holes of 2 MiB: a 4 MiB request needs a new segment, and the device is full.
  t.alloc(Api::kCudaMalloc, 0, 32 * kMiB, "segment", 0, kOutOfMemoryResult);
  // Freeing block 1 joins the holes of blocks 0, 1 and 2: 6 MiB.
  t.free(Api::kNvtxMemRegionUnregister, seg + 2 * kMiB);
  t.alloc(Api::kCudaMalloc, 0, 32 * kMiB, "segment", 0, kOutOfMemoryResult);
  ProcessAnalysis a = t.analyze();
  ASSERT_TRUE(a.has_heaps);
  std::vector<FragmentationPoint> ooms;
  for (const auto& p : a.fragmentation)
    if (p.when == "oom") ooms.push_back(p);
  ASSERT_EQ(ooms.size(), 2u);
  EXPECT_EQ(ooms[0].reserved_bytes, 32 * kMiB);
  EXPECT_EQ(ooms[0].allocated_bytes, 16 * kMiB);
  EXPECT_EQ(ooms[0].space.free_bytes, 16 * kMiB);
  EXPECT_EQ(ooms[0].space.largest_free, 2 * kMiB);
  EXPECT_DOUBLE_EQ(ooms[0].space.index(), 0.875);
  EXPECT_EQ(ooms[1].space.free_bytes, 18 * kMiB);
  EXPECT_EQ(ooms[1].space.largest_free, 6 * kMiB);
  EXPECT_DOUBLE_EQ(ooms[1].space.index(), 1.0 - 6.0 / 18.0);
  // The allocated layer peaked with all 16 blocks.
  ASSERT_TRUE(a.has_allocated);
  ASSERT_EQ(a.allocated.devices.size(), 1u);
  EXPECT_EQ(a.allocated.devices[0].peak_bytes, 32 * kMiB);
  EXPECT_EQ(a.allocated.devices[0].peak_sites[0].location, "block at app.cpp:10");
  // The reserved layer counts the segment once, not its blocks again.
  EXPECT_EQ(a.report.devices[0].peak_bytes, 32 * kMiB);
}

TEST(Fragmentation, HeapResetFreesEveryRegionAndNamesTheAdvice) {
  TraceBuilder t("reset");
  const uint64_t seg = 0x40000000;
  t.alloc(Api::kCudaMalloc, seg, 8 * kMiB, "segment");
  t.alloc(Api::kNvtxMemHeapRegister, seg, 8 * kMiB, "segment", seg);
  for (uint64_t i = 0; i < 8; ++i) t.alloc(Api::kNvtxMemRegionRegister, seg + i * kMiB, kMiB, "block", seg);
  for (uint64_t i = 1; i < 8; i += 2) t.free(Api::kNvtxMemRegionUnregister, seg + i * kMiB);
  t.alloc(Api::kCudaMalloc, 0, 2 * kMiB, "segment", 0, kOutOfMemoryResult);  // 4 MiB free, holes of 1 MiB
  t.free(Api::kNvtxMemHeapReset, seg);
  t.alloc(Api::kCudaMalloc, 0, 16 * kMiB, "segment", 0, kOutOfMemoryResult);
  ProcessAnalysis a = t.analyze();
  nlohmann::json frag = to_json(frag_view({a}));
  std::vector<nlohmann::json> ooms;
  for (const auto& p : frag["processes"][0]["points"])
    if (p["when"] == "oom") ooms.push_back(p);
  ASSERT_EQ(ooms.size(), 2u);
  EXPECT_NE(ooms[0]["advice"].get<std::string>().find("fragmentation caused this out-of-memory"), std::string::npos);
  EXPECT_NE(ooms[0]["advice"].get<std::string>().find("expandable_segments:True"), std::string::npos);
  EXPECT_EQ(ooms[1]["free_bytes"], 8 * kMiB);
  EXPECT_EQ(ooms[1]["largest_free_bytes"], 8 * kMiB);
  EXPECT_EQ(ooms[1]["advice"], "");  // not fragmented: the request is larger than everything free
  EXPECT_EQ(a.allocated.devices[0].live_at_exit_bytes, 0u);
}

TEST(Timeline, BucketsWidenAndKeepTheHighestValue) {
  Timeline t;
  t.record(0, Layer::kReserved, 10, 100);
  t.record(0, Layer::kReserved, 20, 900);  // a spike inside the first bucket
  t.record(0, Layer::kReserved, 30, 200);
  t.record(0, Layer::kReserved, 50'000'000'000ull, 300);  // 50 s: far past the first width
  std::vector<TimelineSeries> series = t.series(60'000'000'000ull);
  ASSERT_EQ(series.size(), 1u);
  EXPECT_LE(series[0].points.size(), Timeline::kBuckets);
  EXPECT_EQ(series[0].points.front().max_bytes, 900u);
  EXPECT_EQ(series[0].points.front().last_bytes, 200u);
  EXPECT_EQ(series[0].points.back().last_bytes, 300u);
  EXPECT_EQ(series[0].points[series[0].points.size() / 2].last_bytes, 200u);  // carried between changes
}

TEST(Check, LimitsAndJUnit) {
  TraceBuilder t("check");
  t.alloc(Api::kCudaMalloc, 0x1000, 3 * kMiB, "model");
  t.alloc(Api::kCudaMalloc, 0x2000, kMiB, "temp");
  t.free(Api::kCudaFree, 0x2000);
  ProcessAnalysis a = t.analyze();
  CheckLimits ok;
  ok.max_peak = 4 * kMiB;
  ok.max_leaked = 3 * kMiB;
  EXPECT_TRUE(check({a}, ok, nullptr).passed);
  CheckLimits broken;
  broken.max_peak = 4 * kMiB - 1;
  CheckResult r = check({a}, broken, nullptr);
  EXPECT_FALSE(r.passed);
  nlohmann::json report = to_json(r);
  EXPECT_EQ(report["limits"][0]["actual"], 4 * kMiB);
  EXPECT_EQ(report["limits"][0]["sites"][0]["location"], "model at app.cpp:10");
  std::string junit = check_junit(r);
  EXPECT_NE(junit.find("<testsuite name=\"memtrace check\" tests=\"1\" failures=\"1\""), std::string::npos);
  EXPECT_NE(junit.find("<failure message=\"FAILED  max-peak: 4.00 MiB exceeds 4.00 MiB"), std::string::npos);
  // Against itself as the baseline: no regression.
  CheckLimits regression;
  regression.max_regression_percent = 0;
  std::vector<ProcessAnalysis> base = {a};
  EXPECT_TRUE(check({a}, regression, &base).passed);
}

TEST(Diff, NamesTheSiteThatGrew) {
  TraceBuilder b("diff-base"), n("diff-new");
  for (TraceBuilder* t : {&b, &n}) t->alloc(Api::kCudaMalloc, 0x1000, 8 * kMiB, "model");
  n.alloc(Api::kCudaMalloc, 0x9000, 2 * kMiB, "new_buffer");
  nlohmann::json d = to_json(diff_view({b.analyze()}, {n.analyze()}, SiteGrouping::kUser));
  EXPECT_EQ(d["peak"][0]["change"], 2 * kMiB);
  ASSERT_EQ(d["sites_at_peak"].size(), 1u);
  EXPECT_EQ(d["sites_at_peak"][0]["location"], "new_buffer at app.cpp:10");
  EXPECT_EQ(d["sites_at_peak"][0]["base"], 0u);
  EXPECT_EQ(d["live_at_exit"]["change"], 2 * kMiB);
}

}  // namespace

TEST(Wording, CallsAProcessDiedInsideAreSaidOnce) {
  ProcessReport p;
  p.pid = 7;
  p.end_reason = "killed by signal 9 (Killed)";
  p.calls[Api::kCudaFree].interrupted = 1;
  p.calls[Api::kCudaMalloc].interrupted = 2;
  std::string text = report_text({p});
  EXPECT_NE(text.find("died inside 1 call of cudaFree: it may or may not have taken effect on the device"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("died inside 2 calls of cudaMalloc: each may or may not have taken effect"), std::string::npos)
      << text;
}

namespace {

// The HTML report draws the largest allocations one by one: the N largest, whatever the trace's
// length, each with when it was made and freed, and the stacks they name resolved.
TEST(LargestAllocations, KeepsTheLargestWithTheirLifetimesAndStacks) {
  TraceBuilder t("largest");
  for (uint64_t i = 1; i <= 100; ++i) t.alloc(Api::kCudaMalloc, 0x100000 * i, i * kMiB, i % 2 ? "odd" : "even");
  for (uint64_t i = 91; i <= 95; ++i) t.free(Api::kCudaFree, 0x100000 * i);
  t.alloc(Api::kCudaMalloc, 0x100000 * 100, 200 * kMiB, "again");  // the same address without a free
  AnalysisOptions options;
  options.largest_allocations = 10;
  ProcessAnalysis p = t.analyze(options);
  ASSERT_EQ(p.largest.size(), 10u);
  EXPECT_EQ(p.allocations_seen, 101u);
  // In the order they were made: 92..100 MiB (91 dropped for the 200 MiB one), then 200 MiB.
  for (size_t k = 0; k < 9; ++k) EXPECT_EQ(p.largest[k].bytes, (92 + k) * kMiB) << k;
  EXPECT_EQ(p.largest[9].bytes, 200 * kMiB);
  for (size_t k = 0; k < 4; ++k) EXPECT_GT(p.largest[k].end_ns, p.largest[k].start_ns) << "92..95 MiB were freed";
  for (size_t k = 4; k < 8; ++k) EXPECT_EQ(p.largest[k].end_ns, 0u) << "96..99 MiB live at the end";
  EXPECT_EQ(p.largest[8].end_ns, p.largest[9].start_ns) << "made again at its address: the first one ended";
  for (const AllocationSpan& a : p.largest) {
    ASSERT_TRUE(p.stacks.count(a.stack_id));
    EXPECT_NE(p.stacks.at(a.stack_id)
                  .location.find(a.bytes == 200 * kMiB ? "again"
                                 : a.bytes / kMiB % 2  ? "odd"
                                                       : "even"),
              std::string::npos);
  }
}

// Text from a trace (function names, arguments) cannot end the page's data script or change how
// the browser parses it.
TEST(HtmlPage, TextFromTheTraceCannotEndItsScript) {
  nlohmann::json data = {{"version", "x"},
                         {"processes", nlohmann::json::array()},
                         {"evil", "</script><script>alert(1)</script><!--<script>"}};
  const std::string page = html_page(data);
  const std::string open = "<script id=\"memtrace-data\" type=\"application/json\">";
  const size_t from = page.find(open) + open.size(), to = page.find("</script>", from);
  ASSERT_NE(to, std::string::npos);
  const std::string inside = page.substr(from, to - from);
  EXPECT_EQ(inside.find('<'), std::string::npos) << inside;
  EXPECT_EQ(nlohmann::json::parse(inside), data);
}

}  // namespace

namespace {

// PyTorch's counters beside memtrace's: the tensors' bytes (torch.alloc to torch.free_completed)
// and PyTorch's segments, now and at their peak since the program last reset them.
void torch_run(TraceBuilder& t) {
  t.alloc(Api::kTorchSegmentAlloc, 0x10000000, 20 * kMiB, "segment");
  t.alloc(Api::kTorchAlloc, 0x10000000, 6 * kMiB, "forward");
  t.alloc(Api::kTorchAlloc, 0x10600000, 3 * kMiB, "forward");
  t.free(Api::kTorchFree, 0x10000000);  // requested free: still counted until completed
  t.free(Api::kTorchFreeCompleted, 0x10000000);
}

TEST(TorchCounters, MemtracesFiguresAgreeWithPyTorchsToTheByte) {
  TraceBuilder t("torch-counters");
  torch_run(t);
  t.counter("exit:requested_bytes.all.current", 3 * kMiB);
  t.counter("exit:requested_bytes.all.peak", 9 * kMiB);
  t.counter("exit:reserved_bytes.all.peak", 20 * kMiB);
  t.counter("exit:allocated_bytes.all.peak", 9 * kMiB + 1024);
  ProcessAnalysis a = t.analyze();
  ASSERT_EQ(a.report.pytorch_counters.size(), 1u);
  const TorchCounters& c = a.report.pytorch_counters[0];
  EXPECT_EQ(c.when, "exit");
  EXPECT_EQ(c.checks.size(), 3u);
  EXPECT_TRUE(c.agrees());
  EXPECT_EQ(c.rounding_at_peak(), 1024);
  std::string text = torch_counters_text(c, 0);
  EXPECT_NE(text.find("agree to the byte"), std::string::npos) << text;
  EXPECT_NE(text.find("by 1.00 KiB"), std::string::npos) << text;
}

// cuBLAS allocates its workspace itself at each cublasCreate (64 MiB on an H200 with cuBLAS 13):
// in the reserved layer, never in PyTorch's reserved_bytes. The report says so beside the figures
// that agree, where the two peaks would otherwise seem to contradict.
TEST(TorchCounters, WhatLibrariesAllocateBesidePyTorchIsSaid) {
  TraceBuilder t("torch-counters-cublas");
  t.alloc(Api::kCudaMalloc, 0x10000000, 20 * kMiB, "segment");
  torch_run(t);
  t.alloc(Api::kCudaMalloc, 0x40000000, 64 * kMiB, "cublasCreate_v2");
  t.counter("exit:reserved_bytes.all.peak", 20 * kMiB);
  ProcessAnalysis a = t.analyze();
  ASSERT_EQ(a.report.pytorch_counters.size(), 1u);
  ASSERT_TRUE(a.report.pytorch_counters[0].agrees());
  const std::string beside = "64.0 MiB more, allocated beside PyTorch's allocator";
  EXPECT_NE(report_text({a.report}).find(beside), std::string::npos) << report_text({a.report});
  EXPECT_EQ(torch_counters_text(a.report.pytorch_counters[0], 0, Layer::kReserved, 20 * kMiB).find(beside),
            std::string::npos);  // no more than PyTorch's segments: nothing to say
  EXPECT_EQ(torch_counters_text(a.report.pytorch_counters[0], 0).find(beside), std::string::npos);
}

TEST(TorchCounters, ADisagreementIsSaidPlainly) {
  TraceBuilder t("torch-counters-differ");
  torch_run(t);
  t.counter("exit:requested_bytes.all.peak", 9 * kMiB + 512);  // PyTorch counted a tensor memtrace did not
  ProcessAnalysis a = t.analyze();
  ASSERT_EQ(a.report.pytorch_counters.size(), 1u);
  EXPECT_FALSE(a.report.pytorch_counters[0].agrees());
  std::string text = torch_counters_text(a.report.pytorch_counters[0], 0);
  EXPECT_NE(text.find("DISAGREE"), std::string::npos) << text;
  EXPECT_NE(text.find("-512 bytes apart"), std::string::npos) << text;
  EXPECT_FALSE(torch_counters_json(a.report.pytorch_counters[0])["agrees"].get<bool>());
}

TEST(TorchCounters, PeaksRestartWhereTheProgramResetPyTorchs) {
  TraceBuilder t("torch-counters-reset");
  torch_run(t);  // 9 MiB at the peak, 3 MiB after
  t.counter("reset_peak", 0);
  t.alloc(Api::kTorchAlloc, 0x10000000, 1 * kMiB, "forward");
  t.counter("exit:requested_bytes.all.peak", 4 * kMiB);
  ProcessAnalysis a = t.analyze();
  ASSERT_EQ(a.report.pytorch_counters.size(), 1u);
  EXPECT_TRUE(a.report.pytorch_counters[0].reset_seen);
  EXPECT_TRUE(a.report.pytorch_counters[0].agrees());
}

// A PyTorch snapshot's frames carry no module: the interpreter's and PyTorch's own are told by
// their names and files.
TEST(Frames, InterpreterAndPyTorchFramesWithoutAModule) {
  auto native = [](const std::string& function, const std::string& file = "??") {
    FrameView f;
    f.function = function;
    f.file = file;
    return f;
  };
  for (const char* name : {"_PyEval_EvalFrameDefault", "PyObject_Call", "pymain_run_python", "cfunction_call"})
    EXPECT_TRUE(is_interpreter_frame(native(name))) << name;
  EXPECT_TRUE(is_interpreter_frame(native("run_mod", "/build/python-3.12.3/Python/pythonrun.c")));
  EXPECT_FALSE(is_interpreter_frame(native("train_step")));
  for (const char* name : {"at::native::empty_cuda(c10::ArrayRef<long>)", "torch::autograd::Engine::thread_main",
                           "THPVariable_backward", "c10::cuda::CUDACachingAllocator::Native::malloc"})
    EXPECT_TRUE(StackView::is_framework_plumbing(native(name))) << name;
  EXPECT_FALSE(StackView::is_framework_plumbing(native("my_kernel_launcher")));
}

// A Python program calling CUDA through ctypes: between its Python frames lie libffi's, ctypes' and
// the interpreter's C frames. None names a site, under any grouping, nor stands in a text stack.
TEST(Stacks, CtypesAndTheInterpretersFramesNameNoSite) {
  TraceBuilder t("ctypes");
  auto native = [](const char* module, const char* function) {
    FrameInfo f;
    f.module = module;
    f.function = function;
    f.address = 0x7000 + std::strlen(function);
    return f;
  };
  auto python = [](const char* file, const char* function, uint32_t line) {
    FrameInfo f;
    f.python = true;
    f.file = file;
    f.function = function;
    f.line = line;
    return f;
  };
  for (const char* caller : {"load_weights", "forward"})
    t.stack(caller,
            {native("/usr/lib/x86_64-linux-gnu/libffi.so.8", ""),
             native("/usr/lib/x86_64-linux-gnu/libffi.so.8", "ffi_call"),
             native("/usr/lib/python3.11/lib-dynload/_ctypes.cpython-311-x86_64-linux-gnu.so", "_ctypes_callproc"),
             native("/usr/bin/python3.11", "_PyObject_MakeTpCall"), python("/app/cuda.py", "malloc", 35),
             native("/usr/bin/python3.11", "_PyEval_EvalFrameDefault"),
             python("/app/train.py", caller, std::string(caller) == "forward" ? 20 : 10),
             native("/lib/x86_64-linux-gnu/libc.so.6", "__libc_start_call_main")});
  t.alloc(Api::kCudaMalloc, 0x10000000, 64 * kMiB, "load_weights");
  t.alloc(Api::kCudaMalloc, 0x20000000, 8 * kMiB, "forward");
  const std::string path = t.finish();
  for (SiteGrouping grouping : {SiteGrouping::kUser, SiteGrouping::kStack, SiteGrouping::kNative}) {
    AnalysisOptions options;
    options.grouping = grouping;
    ProcessAnalysis a;
    std::string error;
    ASSERT_TRUE(analyze_process(path, options, a, error)) << error;
    for (const SiteTotal& site : a.report.devices.at(0).peak_sites) {
      EXPECT_EQ(site.location.find("libffi"), std::string::npos) << site.location;
      EXPECT_EQ(site.location.find("ffi_call"), std::string::npos) << site.location;
      EXPECT_EQ(site.location.find("_Py"), std::string::npos) << site.location;
      EXPECT_EQ(site.location.find("__libc_start"), std::string::npos) << site.location;
      std::string text = stack_text(site.stack, 0, 0, 10);
      EXPECT_EQ(text, std::string("cuda.py:35 in malloc\ntrain.py:") +
                          (site.bytes == 64 * kMiB ? "10 in load_weights\n" : "20 in forward\n"))
          << text;
    }
  }
  // By stack, the two callers of one helper are told apart by the caller, not by the interpreter.
  AnalysisOptions by_stack;
  by_stack.grouping = SiteGrouping::kStack;
  ProcessAnalysis a;
  std::string error;
  ASSERT_TRUE(analyze_process(path, by_stack, a, error)) << error;
  std::vector<std::string> names;
  for (const SiteTotal& site : a.report.devices.at(0).peak_sites) names.push_back(site.location);
  EXPECT_EQ(names,
            (std::vector<std::string>{"malloc ← load_weights at train.py:10", "malloc ← forward at train.py:20"}));
}

}  // namespace
