// Python frames on every CPython this machine has, with the GIL held and released, in every shape
// Python code takes (samples/python/frames.py): exact function, file and line per frame.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>

#include "harness.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr uint64_t kMiB = 1 << 20;

uint32_t line(const std::string& script, const std::string& mark) {
  return e2e::marked_line(e2e::python_sample_path(script), mark);
}

// A frame as "function file:line", to compare stacks and say what differs.
std::string shown(const json& f) {
  return f["function"].get<std::string>() + " " + fs::path(f["file"].get<std::string>()).filename().string() + ":" +
         std::to_string(f["line"].get<uint32_t>());
}

std::vector<std::string> python_frames(const json& alloc) {
  std::vector<std::string> out;
  for (const json& f : alloc["stack"])
    if (f["kind"] == "python") out.push_back(shown(f));
  return out;
}

// The test's C extension, built against INTERPRETER into DIR.
bool build_extension(const e2e::Python& interpreter, const std::string& dir, std::string& why) {
  e2e::Result paths = e2e::run({interpreter.path, "-c",
                                "import sysconfig; print(sysconfig.get_paths()['include']); "
                                "print(sysconfig.get_config_var('EXT_SUFFIX'))"});
  std::istringstream lines(paths.out);
  std::string include, suffix;
  std::getline(lines, include);
  std::getline(lines, suffix);
  if (paths.status != 0 || !fs::exists(include + "/Python.h")) {
    why = "no Python.h for " + interpreter.path;
    return false;
  }
  e2e::Result cc = e2e::run({"/usr/bin/cc", "-shared", "-fPIC", "-g", "-O1", "-I" + include,
                             e2e::python_sample_path("memtrace_ext.c"), "-o", dir + "/memtrace_ext" + suffix,
                             MEMTRACE_CUDART_LIBRARY, "-lpthread"});
  why = cc.err;
  return cc.status == 0;
}

class PythonFrames : public ::testing::TestWithParam<e2e::Python> {
 protected:
  void SetUp() override { interpreter_ = GetParam(); }
  e2e::Python interpreter_;
};

// Allocations by size.
std::map<uint64_t, std::vector<json>> by_size(const std::string& dir) {
  std::map<uint64_t, std::vector<json>> out;
  for (json& e : e2e::exported_events(dir))
    if (e["op"] == "alloc") out[e["size"].get<uint64_t>()].push_back(std::move(e));
  return out;
}

TEST_P(PythonFrames, EveryShapeOfPythonCodeWithTheGilHeldOrReleased) {
  std::string dir = e2e::temp_dir("frames");
  std::string why;
  ASSERT_TRUE(build_extension(interpreter_, dir, why)) << why;
  e2e::Result r = e2e::run_traced(dir, {interpreter_.path, e2e::python_sample_path("frames.py"), dir});
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  json process = e2e::report_json(dir + "/traces")["processes"][0];
  EXPECT_TRUE(process["notices"].empty())
      << "frames are read directly on every version memtrace knows: " << process["notices"].dump();
  auto allocs = by_size(dir);
  const std::string malloc_frame = "malloc cuda.py:" + std::to_string(line("cuda.py", "cudaMalloc"));
  auto innermost = [&](uint64_t size, size_t n = 3) {
    EXPECT_EQ(allocs[size].size(), 1u) << size;
    std::vector<std::string> frames =
        allocs[size].empty() ? std::vector<std::string>() : python_frames(allocs[size][0]);
    if (frames.size() > n) frames.resize(n);
    return frames;
  };
  auto at = [&](const char* function, const char* mark) {
    return std::string(function) + " frames.py:" + std::to_string(line("frames.py", mark));
  };

  // PyDLL (GIL held) and CDLL (released): the same frames.
  std::vector<std::string> held = innermost(kMiB + 16, 100), released = innermost(kMiB + 32, 100);
  EXPECT_EQ(held, released);
  ASSERT_GE(held.size(), 3u);
  EXPECT_EQ(held[0], malloc_frame);
  EXPECT_EQ(held[1], at("ctypes_both", "frames-ctypes"));
  EXPECT_EQ(held[2], at("main", "frames-main-ctypes"));

  // A C extension that released the GIL: its caller's line, the extension's own frame native.
  ASSERT_EQ(allocs[2 * kMiB].size(), 1u);
  const json& ext = allocs[2 * kMiB][0];
  EXPECT_EQ(python_frames(ext)[0], at("extension", "frames-ext"));
  EXPECT_EQ(shown(ext["stack"][0]),
            "allocate memtrace_ext.c:" +
                std::to_string(e2e::marked_line(e2e::python_sample_path("memtrace_ext.c"), "ext-malloc")));

  // Generators, coroutines, lambdas, exec.
  EXPECT_EQ(innermost(3 * kMiB, 2), (std::vector<std::string>{malloc_frame, at("generator", "frames-generator")}));
  EXPECT_EQ(innermost(4 * kMiB, 3), (std::vector<std::string>{malloc_frame, at("coroutine", "frames-coroutine"),
                                                              at("run_coroutine", "frames-run-coroutine")}));
  std::vector<std::string> lambda = innermost(5 * kMiB, 2);
  ASSERT_EQ(lambda.size(), 2u);
  EXPECT_NE(lambda[1].find("<lambda> frames.py:" + std::to_string(line("frames.py", "frames-lambda"))),
            std::string::npos)
      << lambda[1];
  EXPECT_EQ(innermost(6 * kMiB, 3),
            (std::vector<std::string>{malloc_frame, "<module> generated.py:1", at("shapes", "frames-exec")}));

  // A native thread: native frames only, and the stack says so.
  ASSERT_EQ(allocs[7 * kMiB].size(), 1u);
  EXPECT_EQ(allocs[7 * kMiB][0]["python_frames"], "none");
  EXPECT_TRUE(python_frames(allocs[7 * kMiB][0]).empty());

  // Sixty calls deep: every one of them.
  std::vector<std::string> deep = innermost(8 * kMiB, 1000);
  EXPECT_EQ(std::count(deep.begin(), deep.end(), at("deep", "frames-deep")), 1);
  EXPECT_EQ(std::count(deep.begin(), deep.end(), at("deep", "frames-recurse")), 60);

  // Threading workers with the GIL released while the main thread runs Python: each its own frames.
  for (uint64_t k = 0; k < 4; ++k) {
    const std::vector<json>& worker = allocs[9 * kMiB + k * 64 * 1024];
    ASSERT_EQ(worker.size(), 20u) << "worker " << k;
    for (const json& a : worker) {
      std::vector<std::string> frames = python_frames(a);
      ASSERT_GE(frames.size(), 3u);
      EXPECT_EQ(frames[1], at("worker", "frames-worker"));
      EXPECT_NE(frames[2].find("run "), std::string::npos) << frames[2];  // Thread.run
      EXPECT_NE(a["tid"], a["pid"]);
      for (const std::string& f : frames) EXPECT_EQ(f.find("threads "), std::string::npos) << "the main thread's";
    }
  }

  // Code objects that died and left their address to the next: each allocation names its own.
  for (uint64_t i = 0; i < 200; ++i) {
    std::vector<std::string> frames = innermost(10 * kMiB + i * 4096, 2);
    ASSERT_EQ(frames.size(), 2u) << i;
    EXPECT_EQ(frames[1], "f_" + std::to_string(i) + " gen_" + std::to_string(i) + ".py:2");
  }

  // Notebook cells of the same shape, run one after another from the same place: each its own.
  // Before 3.12 nothing tells a cell's code from the last one's at its address but its texts, of
  // which memtrace reads the ends: file names that differ only in their middle are not told apart.
  for (uint64_t i = 0; i < 200; ++i) {
    std::vector<std::string> frames = innermost(12 * kMiB + i * 4096, 3);
    ASSERT_EQ(frames.size(), 3u) << i;
    EXPECT_EQ(frames[1], "<module> cell_" + std::to_string(i) + ".py:1");
    EXPECT_EQ(frames[2], at("notebook_cells", "frames-cell"));
    if (interpreter_.minor < 12) continue;
    char file[32];
    std::snprintf(file, sizeof file, "cell_%03d/main.py", static_cast<int>(i));
    frames = innermost(13 * kMiB + i * 4096, 2);
    ASSERT_EQ(frames.size(), 2u) << i;
    EXPECT_EQ(frames[1], "<module> main.py:1");
    std::vector<std::string> files;  // the cell's whole path, which shown() cuts to its last part
    for (const json& f : allocs[13 * kMiB + i * 4096][0]["stack"])
      if (f["kind"] == "python") files.push_back(f["file"]);
    ASSERT_GE(files.size(), 2u);
    EXPECT_NE(files[1].find(file), std::string::npos) << files[1] << " for cell " << i;
  }

  // An installed package's code: the site is the user's line that called into it.
  e2e::Result leaks = e2e::run({e2e::kMemtrace, "leaks", "--json", dir + "/traces"});
  json site = json::parse(leaks.out)["processes"][0]["devices"][0]["sites"][0];
  EXPECT_EQ(site["bytes"], 11 * kMiB);
  EXPECT_EQ(site["location"],
            "frames.py:" + std::to_string(line("frames.py", "frames-library")) + " in through_library");
  e2e::Result by_python = e2e::run({e2e::kMemtrace, "leaks", "--json", "--by", "python", dir + "/traces"});
  EXPECT_NE(json::parse(by_python.out)["processes"][0]["devices"][0]["sites"][0]["location"].get<std::string>().find(
                "__init__.py"),
            std::string::npos)
      << "--by python keeps the innermost Python frame, wherever it is";
}

TEST_P(PythonFrames, DeeperThanTheStackDepthThePythonFramesAreAllThere) {
  std::string dir = e2e::temp_dir("deep");
  e2e::Result r = e2e::run_traced(dir, {interpreter_.path, e2e::python_sample_path("frames.py"), dir, "deep"},
                                  {"--stack-depth", "8"});
  ASSERT_EQ(r.status, 0) << r.err;
  auto allocs = by_size(dir);
  ASSERT_EQ(allocs[8 * kMiB].size(), 1u);
  const json& a = allocs[8 * kMiB][0];
  // The native walk ends with the outermost call of the evaluation loop: before 3.11 each Python
  // call is one (and more than 8 native frames), since then Python calls Python within one call.
  EXPECT_EQ(a.value("stack_truncated", false), interpreter_.minor < 11) << a["stack"].dump(1);
  std::vector<std::string> frames = python_frames(a);
  auto deep = "deep frames.py:" + std::to_string(line("frames.py", "frames-recurse"));
  EXPECT_EQ(std::count(frames.begin(), frames.end(), deep), 60) << frames.size();
  EXPECT_NE(frames.back().find("<module> frames.py"), std::string::npos) << frames.back();
}

// memtrace counts code objects' deaths through PyCode_Type's tp_dealloc, wrapped (python_stack.cpp):
// when another tool puts back the one it found before (CPython's own), deaths go uncounted, and
// memtrace must tell each code object from the dead one at its address by reading it again.
TEST_P(PythonFrames, ACodeDeallocPutBackByAnotherToolLeavesEachAllocationItsOwnFunction) {
  std::string dir = e2e::temp_dir("replaced-dealloc");
  const int count = 200;
  e2e::Result r = e2e::run_traced(
      dir, {interpreter_.path, e2e::python_sample_path("replaced_code_dealloc.py"), std::to_string(count)});
  if (r.status == 3) GTEST_SKIP() << "no symbol table to find code_dealloc in: " << interpreter_.path;
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("done"), std::string::npos) << r.out;
  auto allocs = by_size(dir);
  for (int i = 0; i < count; ++i) {
    const std::vector<json>& a = allocs[kMiB + static_cast<uint64_t>(i) * 4096];
    ASSERT_EQ(a.size(), 1u) << i;
    std::vector<std::string> frames = python_frames(a[0]);
    ASSERT_GE(frames.size(), 2u) << i;
    EXPECT_EQ(frames[1], "f_" + std::to_string(i) + " gen_" + std::to_string(i) + ".py:2");
  }
}

// The native walk ends with the outermost Python frame (the evaluation loop's call that began
// it): the interpreter's start-up below it is not walked, the C library's frames between Python
// ones are kept. The same line allocates again and again (the walk's depth remembered for it),
// then from a shallower place.
// memtrace's own walk of the native stack (injector/frame_walk.h) stands in for libunwind's: in
// every shape of Python code (the evaluation loops, generators, a C extension, threads without
// the GIL), each allocation has the stack libunwind gives it, frame for frame.
TEST_P(PythonFrames, TheOwnWalkGivesTheStacksLibunwindGives) {
  std::map<std::string, std::map<uint64_t, std::multiset<std::string>>> stacks;  // walk: size: stacks
  for (const char* walk : {"own", "libunwind"}) {
    std::string dir = e2e::temp_dir(std::string("walk-") + walk);
    std::string why;
    ASSERT_TRUE(build_extension(interpreter_, dir, why)) << why;
    ::setenv("MEMTRACE_FRAME_WALK", walk, 1);
    e2e::Result r = e2e::run_traced(dir, {interpreter_.path, e2e::python_sample_path("frames.py"), dir});
    ::unsetenv("MEMTRACE_FRAME_WALK");
    ASSERT_EQ(r.status, 0) << r.out << r.err;
    for (auto& [size, allocs] : by_size(dir))
      for (const json& a : allocs) {
        std::string frames;  // each frame's module and file by name alone: the runs' folders differ
        for (const json& f : a["stack"])
          frames += f.value("kind", "") + " " + f.value("function", "") + " " +
                    fs::path(f.value("file", "")).filename().string() + ":" + std::to_string(f.value("line", 0)) + " " +
                    fs::path(f.value("module", "")).filename().string() + "+" +
                    std::to_string(f.value("offset", uint64_t(0))) + "\n";
        stacks[walk][size].insert(frames);
      }
  }
  ASSERT_FALSE(stacks["own"].empty());
  ASSERT_EQ(stacks["own"].size(), stacks["libunwind"].size());
  for (auto& [size, own] : stacks["own"]) {
    const auto& theirs = stacks["libunwind"][size];
    ASSERT_EQ(own.size(), theirs.size()) << size;
    for (auto a = own.begin(), b = theirs.begin(); a != own.end(); ++a, ++b)
      EXPECT_EQ(*a, *b) << "allocations of " << size << " bytes";
  }
}

TEST_P(PythonFrames, TheNativeWalkEndsWithTheOutermostPythonFrame) {
  std::string dir = e2e::temp_dir("callback");
  e2e::Result r = e2e::run_traced(dir, {interpreter_.path, e2e::python_sample_path("callback.py"), "4"});
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  auto allocs = by_size(dir);
  auto at = [&](const char* function, const char* mark) {
    return std::string(function) + " callback.py:" + std::to_string(line("callback.py", mark));
  };
  ASSERT_EQ(allocs[kMiB].size(), 4u);  // one comparison a sort of two
  for (const json& a : allocs[kMiB]) {
    const json& stack = a["stack"];
    std::vector<std::string> frames = python_frames(a);
    ASSERT_EQ(frames.size(), 5u) << stack.dump(1);
    EXPECT_EQ(frames[1], at("compare", "callback-alloc"));
    EXPECT_EQ(frames[2], at("sort", "callback-qsort"));
    EXPECT_EQ(frames[3], at("main", "callback-main"));
    EXPECT_EQ(frames[4], at("<module>", "callback-module"));
    // Between compare and sort: qsort, which called back into Python.
    size_t compare_at = stack.size(), sort_at = stack.size();
    for (size_t i = 0; i < stack.size(); ++i) {
      if (stack[i]["kind"] != "python") continue;
      if (stack[i]["function"] == "compare") compare_at = i;
      if (stack[i]["function"] == "sort") sort_at = i;
    }
    ASSERT_LT(compare_at, sort_at) << stack.dump(1);
    std::string between;
    for (size_t i = compare_at + 1; i < sort_at; ++i) between += stack[i].value("function", "") + " ";
    EXPECT_NE(between.find("qsort"), std::string::npos) << stack.dump(1);
    // Nothing below the module's frame: no Py_RunMain, no main.
    EXPECT_EQ(stack.back()["kind"], "python") << stack.dump(1);
    EXPECT_EQ(stack.dump().find("Py_RunMain"), std::string::npos) << stack.dump(1);
    EXPECT_FALSE(a.value("stack_truncated", false));
  }
  ASSERT_EQ(allocs[2 * kMiB].size(), 1u);
  const json& direct = allocs[2 * kMiB][0];
  EXPECT_EQ(python_frames(direct),
            (std::vector<std::string>{"malloc cuda.py:" + std::to_string(line("cuda.py", "cudaMalloc")),
                                      at("main", "callback-direct"), at("<module>", "callback-module")}));
  EXPECT_EQ(direct["stack"].back()["kind"], "python") << direct["stack"].dump(1);
  EXPECT_EQ(direct["stack"].dump().find("qsort"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(CPython, PythonFrames, ::testing::ValuesIn(e2e::readable_pythons()), [](const auto& info) {
  return (info.param.path.rfind("/usr/", 0) == 0 ? "system_3_" : "pyenv_3_") + std::to_string(info.param.minor);
});
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(PythonFrames);  // a machine without Python 3.9+

TEST(PythonFrames, OlderPythonsRunUnharmed) {
  // Before 3.9 CPython lacks what memtrace reads frames with: the program runs as it would, and
  // its allocations are recorded with native frames.
  int tried = 0;
  for (const e2e::Python& p : e2e::pythons()) {
    if (p.minor >= 9) continue;
    ++tried;
    SCOPED_TRACE(p.path);
    std::string dir = e2e::temp_dir("old");
    e2e::Result r = e2e::run_traced(dir, {p.path, e2e::python_sample_path("worker_thread.py")});
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(by_size(dir).size(), 2u);
  }
  if (tried == 0) GTEST_SKIP() << "no Python older than 3.9 on this machine";
}

// Whether STACK (a JSON stack) has the Python frame FUNCTION at SCRIPT's line MARK.
bool has_frame(const json& stack, const std::string& function, const std::string& script, const std::string& mark) {
  for (const json& f : stack)
    if (f["kind"] == "python" && f["function"] == function && f["line"] == line(script, mark)) return true;
  return false;
}

TEST(PythonFrames, EveryViewNamesTheLeakingFunctionOfAGilReleasedLeak) {
  // leak.py's allocations release the GIL, as PyTorch's do; accumulate_stats keeps 64 KiB a batch.
  std::string base = e2e::temp_dir("leak10"), next = e2e::temp_dir("leak30");
  ASSERT_EQ(e2e::run_traced(base, e2e::python_sample("leak.py", {"10"})).status, 0);
  ASSERT_EQ(e2e::run_traced(next, e2e::python_sample("leak.py", {"30"}), {"--snapshot-at-peak"}).status, 0);

  // By whole stack: the user frame (cuda.malloc) is a helper every allocation goes through.
  e2e::Result leaks = e2e::run({e2e::kMemtrace, "leaks", "--json", "--by", "stack", next + "/traces"});
  json sites = json::parse(leaks.out)["processes"][0]["devices"][0]["sites"];
  ASSERT_EQ(sites.size(), 1u) << sites.dump(1);
  EXPECT_EQ(sites[0]["count"], 30);
  EXPECT_TRUE(has_frame(sites[0]["stack"], "accumulate_stats", "leak.py", "leak")) << sites[0]["stack"].dump(1);

  e2e::Result diff = e2e::run({e2e::kMemtrace, "diff", "--json", "--by", "stack", base + "/traces", next + "/traces"});
  json changed = json::parse(diff.out)["sites_at_peak"];
  ASSERT_FALSE(changed.empty()) << diff.out;
  EXPECT_TRUE(has_frame(changed[0]["stack"], "accumulate_stats", "leak.py", "leak")) << changed[0].dump(1);

  e2e::Result snapshot = e2e::run({e2e::kMemtrace, "snapshot", "--json", "--by", "stack", next + "/traces"});
  ASSERT_EQ(snapshot.status, 0) << snapshot.err;
  json at_peak = json::parse(snapshot.out);
  bool found = false;
  for (const json& site : at_peak["sites"]) found |= has_frame(site["stack"], "accumulate_stats", "leak.py", "leak");
  EXPECT_TRUE(found) << snapshot.out;

  json report = e2e::report_json(next + "/traces");
  // The helper every allocation goes through, told apart by its caller.
  EXPECT_EQ(report["processes"][0]["devices"][0]["top_sites_at_peak"][0]["location"],
            "malloc ← accumulate_stats at leak.py:" + std::to_string(line("leak.py", "leak")));
}

TEST(PythonFrames, EveryVersionMemtraceReadsIsHere) {
  std::string missing;
  for (int minor = 9; minor <= 13; ++minor)
    if (std::none_of(e2e::pythons().begin(), e2e::pythons().end(),
                     [&](const e2e::Python& p) { return p.minor == minor; }))
      missing += " 3." + std::to_string(minor);
  if (!missing.empty()) GTEST_SKIP() << "not on this machine, so not tested:" << missing;
}

// The shape most programs have (issue 31): one allocation helper called from everywhere, threads,
// and a caller that keeps 2 MiB a step. The default answers name the callers: the leak's, with its
// true growth per step, and the one that holds the most at the peak; the CI gate measures the same.
TEST(HelperSites, TheDefaultAnswersNameTheHelpersCallers) {
  const std::string dir = e2e::temp_dir("helper");
  e2e::Result run = e2e::run({e2e::kMemtrace, "run", "--sim", "-o", dir + "/traces", "--", MEMTRACE_PYTHON,
                              e2e::python_sample_path("helper_alloc.py"), "10"});
  ASSERT_EQ(run.status, 0) << run.err;
  const std::string leak_line = std::to_string(line("helper_alloc.py", "log_metrics"));
  e2e::Result leaks = e2e::run({e2e::kMemtrace, "leaks", "--json", dir + "/traces"});
  ASSERT_EQ(leaks.status, 0) << leaks.err;
  json growth = json::parse(leaks.out)["processes"][0]["growth"];
  ASSERT_EQ(growth.size(), 1u) << growth.dump(1);
  EXPECT_EQ(growth[0]["location"], "device_alloc ← log_metrics at helper_alloc.py:" + leak_line);
  EXPECT_EQ(growth[0]["bytes_per_step"], 2 << 20);
  e2e::Result text = e2e::run({e2e::kMemtrace, "leaks", dir + "/traces"});
  EXPECT_NE(text.out.find("2.00 MiB/step"), std::string::npos) << text.out;

  EXPECT_EQ(e2e::run({e2e::kMemtrace, "check", "--max-growth-per-step", "3MiB", dir + "/traces"}).status, 0);
  e2e::Result over = e2e::run({e2e::kMemtrace, "check", "--max-growth-per-step", "1MiB", dir + "/traces"});
  EXPECT_EQ(over.status, 1) << over.out;
  EXPECT_NE(over.out.find("log_metrics"), std::string::npos) << over.out;

  json peak = e2e::command_json({e2e::kMemtrace, "peak", "--json", dir + "/traces"});
  json top = peak["processes"][0]["devices"][0]["sites"][0];
  EXPECT_EQ(top["location"],
            "device_alloc ← load_weights at helper_alloc.py:" + std::to_string(line("helper_alloc.py", "load_weights")))
      << peak.dump(1);
  EXPECT_EQ(top["bytes"], 64 << 20);
}

}  // namespace
