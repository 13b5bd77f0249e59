// Stacks: exact native call paths with file and line (inlined calls as frames of their own),
// Python frames where the interpreter stood, and sensible output at every limit.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <optional>

#include "harness.h"
#include "memtrace/format/trace_reader.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string source(const std::string& name) { return std::string(MEMTRACE_SAMPLES_SOURCE) + "/" + name; }

std::vector<json> allocations(const std::string& dir) {
  std::vector<json> out;
  for (json& e : e2e::exported_events(dir))
    if (e["op"] == "alloc") out.push_back(std::move(e));
  return out;
}

std::string base(const json& frame, const char* field) {
  return fs::path(frame[field].get<std::string>()).filename().string();
}

void expect_frame(const json& frame, const std::string& function, const std::string& file, uint32_t line) {
  EXPECT_EQ(frame["kind"], "native") << frame;
  EXPECT_NE(frame["function"].get<std::string>().find(function), std::string::npos) << frame;
  EXPECT_EQ(base(frame, "file"), file) << frame;
  EXPECT_EQ(frame["line"], line) << frame;
}

TEST(Stacks, NativeCallPathWithFilesLinesAndInlinedFrames) {
  std::string dir = e2e::temp_dir("callpath");
  ASSERT_EQ(e2e::run_sample(dir, "call_path").status, 0);
  std::vector<json> allocs = allocations(dir);
  ASSERT_EQ(allocs.size(), 1u);
  const json& stack = allocs[0]["stack"];
  const std::string file = source("call_path.cpp");
  ASSERT_GE(stack.size(), 6u) << stack.dump(1);
  expect_frame(stack[0], "inlined_malloc", "call_path.cpp", e2e::marked_line(file, "inlined_malloc"));
  EXPECT_EQ(stack[0]["inlined"], true) << "inlined_malloc was inlined into allocate_buffer";
  expect_frame(stack[1], "allocate_buffer", "call_path.cpp", e2e::marked_line(file, "allocate_buffer"));
  expect_frame(stack[2], "level_two", "call_path.cpp", e2e::marked_line(file, "level_two"));
  expect_frame(stack[3], "level_one", "call_path.cpp", e2e::marked_line(file, "level_one"));
  expect_frame(stack[4], "recurse", "call_path.cpp", e2e::marked_line(file, "recurse"));
  expect_frame(stack[5], "main", "call_path.cpp", e2e::marked_line(file, "main"));
  EXPECT_FALSE(allocs[0].contains("stack_truncated"));

  // The report names the site by its innermost frame of the program.
  json report = e2e::report_json(dir + "/traces");
  const json& site = report["processes"][0]["devices"][0]["top_sites_at_peak"][0];
  EXPECT_EQ(site["location"],
            "inlined_malloc at call_path.cpp:" + std::to_string(e2e::marked_line(file, "inlined_malloc")));
}

TEST(Stacks, DeeperThanTheLimitIsTruncatedAndSaysSo) {
  std::string dir = e2e::temp_dir("deep");
  ASSERT_EQ(e2e::run_sample(dir, "call_path", {"--depth", "200"}, {"--stack-depth", "20"}).status, 0);
  std::vector<json> allocs = allocations(dir);
  ASSERT_EQ(allocs.size(), 1u);
  EXPECT_EQ(allocs[0]["stack_truncated"], true);
  const json& stack = allocs[0]["stack"];
  EXPECT_LE(stack.size(), 21u);  // 20 return addresses, one of them with an inlined frame
  EXPECT_GE(stack.size(), 20u);
  EXPECT_NE(stack.back()["function"].get<std::string>().find("recurse"), std::string::npos) << stack.back();
  e2e::Result text = e2e::run({e2e::kMemtrace, "report", dir + "/traces"});
  EXPECT_EQ(text.status, 0) << text.err;
}

TEST(Stacks, NoNativeStacksKeepsTheCaller) {
  std::string dir = e2e::temp_dir("nonative");
  ASSERT_EQ(e2e::run_sample(dir, "call_path", {}, {"--no-native-stacks"}).status, 0);
  std::vector<json> allocs = allocations(dir);
  ASSERT_EQ(allocs.size(), 1u);
  const json& stack = allocs[0]["stack"];
  ASSERT_EQ(stack.size(), 2u) << stack.dump(1);  // the caller's address: inlined_malloc in allocate_buffer
  EXPECT_NE(stack[1]["function"].get<std::string>().find("allocate_buffer"), std::string::npos);
}

TEST(Stacks, UnloadedAndStrippedLibraries) {
  std::string dir = e2e::temp_dir("plugins");
  ASSERT_EQ(e2e::run_sample(dir, "plugins", {MEMTRACE_SAMPLES_DIR}).status, 0);
  std::vector<json> allocs = allocations(dir);
  ASSERT_EQ(allocs.size(), 3u);
  // Unloaded before the end, still symbolized from the library it was.
  expect_frame(allocs[0]["stack"][0], "plugin_internal_alloc", "plugin_alloc.cpp",
               e2e::marked_line(source("plugin_alloc.cpp"), "plugin"));
  EXPECT_EQ(base(allocs[0]["stack"][0], "module"), "libplugin_alloc.so");
  // Stripped: the hidden function has no name; the frame says its module and offset.
  const json& stripped = allocs[1]["stack"][0];
  EXPECT_EQ(stripped["function"], "");
  EXPECT_EQ(base(stripped, "module"), "libplugin_stripped.so");
  EXPECT_GT(stripped["offset"].get<uint64_t>(), 0u);
  EXPECT_EQ(allocs[1]["stack"][1]["function"], "plugin_allocate");  // exported, so named
  expect_frame(allocs[2]["stack"][0], "main", "plugins.cpp", e2e::marked_line(source("plugins.cpp"), "after-plugins"));

  json report = e2e::report_json(dir + "/traces");
  EXPECT_EQ(report["processes"][0]["exit_status"], 0);
}

// The functions of the path an allocation's size names (samples/stack_shapes.cpp), innermost
// first, through the thread's worker.
std::vector<std::string> path_of(uint64_t bytes, bool rare) {
  const uint64_t n = bytes / 256 - 1;
  const int depth = static_cast<int>(n % 64);
  const uint64_t bits = n / 64;
  std::vector<std::string> path{"::allocate(", "::descend("};
  for (int level = depth - 1; level >= 0; --level) {
    const bool right = level < 12 ? (bits >> level) & 1 : (depth + level) % 3 == 0;
    path.push_back(right ? "::right(" : "::left(");
    path.push_back("::descend(");
  }
  path.push_back(rare ? "::rare_worker(" : "::worker(");
  return path;
}

// Every allocation's stack is its path, frame for frame, while four threads allocate at once and
// half their stacks share all but a few frames with their last one (sent by reference to it:
// ring::kStackKept); in a ring of 512 slots, so that a thread's kept stack goes out of the
// collector's reach (the sample's rare thread, 2,000 allocations later) and is sent whole again.
// Paths 31 levels deep and more are deeper than the 64 frames recorded.
TEST(Stacks, EveryStackIsItsPathWhileThreadsReuseTheirLastStacksFrames) {
  std::string dir = e2e::temp_dir("shapes");
  e2e::Result r =
      e2e::run({e2e::kMemtrace, "run", "--sim", "-o", dir + "/traces", "--", e2e::sample_path("stack_shapes"),
                "--threads", "4", "--allocations", "3000", "--gap", "2000"},
               {"MEMTRACE_RING_BYTES=65536"});
  ASSERT_EQ(r.status, 0) << r.err;
  std::vector<json> allocs = allocations(dir);
  ASSERT_EQ(allocs.size(), 2u + 3u * 3000u);
  std::map<uint64_t, int> rare_tid;  // the rare thread's two allocations: its first stack says it
  size_t truncated = 0, checked = 0;
  std::optional<size_t> below;  // the thread's start, below its worker: as many frames each time
  for (const json& a : allocs) {
    const json stack = a.value("stack", json::array());
    ASSERT_FALSE(stack.empty()) << a;
    bool rare = false;
    for (const json& f : stack) rare |= f["function"].get<std::string>().find("::rare_worker(") != std::string::npos;
    const std::vector<std::string> path = path_of(a["size"].get<uint64_t>(), rare);
    if (!a.value("stack_truncated", false)) {
      ASSERT_GT(stack.size(), path.size()) << a;
      if (!below) below = stack.size() - path.size();
      EXPECT_EQ(stack.size(), path.size() + *below) << a;
    } else {
      ++truncated;
      EXPECT_EQ(stack.size(), 64u) << a;
      if (below) {
        EXPECT_GT(path.size() + *below, 64u) << a;
      }
    }
    for (size_t i = 0; i < path.size() && i < stack.size(); ++i)
      ASSERT_NE(stack[i]["function"].get<std::string>().find(path[i]), std::string::npos)
          << "frame " << i << " of an allocation of " << a["size"] << " (" << path.size()
          << " frames): " << stack.dump(1);
    rare_tid[a["tid"].get<uint64_t>()] += rare;
    ++checked;
  }
  EXPECT_EQ(checked, allocs.size());
  EXPECT_GT(truncated, 0u);
  EXPECT_LT(truncated, allocs.size() / 2);
  size_t rare_allocations = 0;
  for (const auto& [tid, n] : rare_tid) rare_allocations += n;
  EXPECT_EQ(rare_allocations, 2u) << "the rare thread's allocations, the second a ring's length after the first";
}

TEST(Stacks, RepeatedStacksAreInterned) {
  std::string dir = e2e::temp_dir("interned");
  ASSERT_EQ(e2e::run_sample(dir, "train_loop", {"--steps", "50"}).status, 0);
  fs::path trace = fs::directory_iterator(dir + "/traces")->path();
  std::string error;
  auto reader = memtrace::TraceReader::open(trace.string(), error);
  ASSERT_TRUE(reader) << error;
  memtrace::Event e;
  uint64_t events = 0, max_stack = 0;
  while (reader->next(e)) {
    ++events;
    max_stack = std::max(max_stack, e.stack_id);
  }
  EXPECT_GT(events, 800u);
  EXPECT_LT(max_stack, 20u) << "each distinct stack once, however often it allocates";
}

uint32_t python_line(const std::string& script, const std::string& mark) {
  return e2e::marked_line(e2e::python_sample_path(script), mark);
}

void expect_python(const json& frame, const std::string& function, const std::string& script, uint32_t line) {
  EXPECT_EQ(frame["kind"], "python") << frame;
  EXPECT_EQ(frame["function"], function) << frame;
  EXPECT_EQ(base(frame, "file"), script) << frame;
  EXPECT_EQ(frame["line"], line) << frame;
}

TEST(PythonStacks, FramesOfTheAllocatingLinesAmongTheNativeOnes) {
  std::string dir = e2e::temp_dir("python");
  e2e::Result r = e2e::run_traced(dir, e2e::python_sample("train_loop.py", {"2", "2"}));
  ASSERT_EQ(r.status, 0) << r.err;
  std::vector<json> allocs = allocations(dir);
  ASSERT_EQ(allocs.size(), 8u);  // 2 layers x (param, optimizer) + 2 steps x 2 activations

  // An activation: allocated in forward, in train_step, in main, in the module.
  const json& stack = allocs[4]["stack"];
  size_t first_python = 0;
  while (first_python < stack.size() && stack[first_python]["kind"] == "native") ++first_python;
  ASSERT_GT(first_python, 0u) << "the ctypes call's native frames come first: " << stack.dump(1);
  ASSERT_LT(first_python + 4, stack.size()) << stack.dump(1);
  EXPECT_NE(stack.dump().find("ffi_call"), std::string::npos) << "libffi's frames of the ctypes call";
  expect_python(stack[first_python], "malloc", "cuda.py", python_line("cuda.py", "cudaMalloc"));
  expect_python(stack[first_python + 1], "forward", "train_loop.py", python_line("train_loop.py", "forward"));
  expect_python(stack[first_python + 2], "train_step", "train_loop.py", python_line("train_loop.py", "train_step"));
  expect_python(stack[first_python + 3], "main", "train_loop.py", python_line("train_loop.py", "main-step"));
  // The module's frame, outermost of the Python ones: the native walk ends with the evaluation
  // loop's call that began it, so the interpreter's start-up below (Py_RunMain, main) is not there.
  size_t module = stack.size();
  for (size_t i = first_python + 4; i < stack.size(); ++i)
    if (stack[i]["kind"] == "python") module = i;
  ASSERT_LT(module, stack.size());
  expect_python(stack[module], "<module>", "train_loop.py", python_line("train_loop.py", "module"));
  EXPECT_EQ(module + 1, stack.size()) << stack.dump(1);
  EXPECT_EQ(stack.dump().find("Py_RunMain"), std::string::npos);

  // A parameter: build_model's list comprehension (its own frame before 3.12), then main.
  std::string params = allocs[0]["stack"].dump();
  EXPECT_NE(params.find("build_model"), std::string::npos) << params;
}

TEST(PythonStacks, AThreadThatReleasedTheGilHasItsPythonFramesToo) {
  std::string dir = e2e::temp_dir("nogil");
  ASSERT_EQ(e2e::run_traced(dir, e2e::python_sample("worker_thread.py")).status, 0);
  std::vector<json> allocs = allocations(dir);
  ASSERT_EQ(allocs.size(), 2u);
  for (const auto& [alloc, mark] : {std::pair{&allocs[0], "worker-gil"}, {&allocs[1], "worker-nogil"}}) {
    EXPECT_FALSE(alloc->contains("python_frames")) << alloc->dump();
    bool found_worker = false;
    for (const json& f : (*alloc)["stack"])
      if (f["kind"] == "python" && f["function"] == "worker") {
        found_worker = true;
        EXPECT_EQ(f["line"], python_line("worker_thread.py", mark));
      }
    EXPECT_TRUE(found_worker) << (*alloc)["stack"].dump(1);
    EXPECT_NE((*alloc)["tid"], (*alloc)["pid"]) << "allocated on the worker thread";
  }
  EXPECT_NE(allocs[1]["stack"].dump().find("ffi_call"), std::string::npos);

  e2e::Result text = e2e::run({e2e::kMemtrace, "report", dir + "/traces"});
  EXPECT_EQ(text.status, 0);
}

TEST(PythonStacks, CanBeTurnedOff) {
  std::string dir = e2e::temp_dir("nopython");
  ASSERT_EQ(e2e::run_traced(dir, e2e::python_sample("leak.py"), {"--no-python-stacks"}).status, 0);
  std::vector<json> allocs = allocations(dir);
  EXPECT_EQ(allocs.size(), 40u) << "every allocation recorded, through ctypes too";  // 20 batches × 2
  for (const json& a : allocs)
    for (const json& f : a["stack"]) EXPECT_EQ(f["kind"], "native");
}

TEST(PythonStacks, ReportGroupsSitesAsAsked) {
  std::string dir = e2e::temp_dir("grouping");
  ASSERT_EQ(e2e::run_traced(dir, e2e::python_sample("leak.py")).status, 0);
  auto sites = [&](const std::string& by) {
    e2e::Result r = e2e::run({e2e::kMemtrace, "report", "--json", "--by", by, dir + "/traces"});
    EXPECT_EQ(r.status, 0) << r.err;
    return json::parse(r.out)["processes"][0]["devices"][0]["top_sites_at_peak"];
  };
  // Innermost user frame, the helper both allocations go through, split by its callers and named
  // after them.
  json user = sites("user");
  ASSERT_EQ(user.size(), 2u) << user.dump(1);
  std::string locations = user[0]["location"].get<std::string>() + "|" + user[1]["location"].get<std::string>();
  EXPECT_NE(locations.find("malloc ← accumulate_stats at leak.py:"), std::string::npos) << locations;
  EXPECT_EQ(user[0]["location"].get<std::string>().rfind("malloc ← ", 0), 0u) << locations;
  // Whole stacks: the leak in accumulate_stats stands apart from the batch buffer.
  json by_stack = sites("stack");
  ASSERT_EQ(by_stack.size(), 2u) << by_stack.dump(1);
  EXPECT_NE(by_stack.dump().find("accumulate_stats"), std::string::npos);
  // Native: the innermost frame outside the CUDA libraries, which is not Python.
  json native = sites("native");
  ASSERT_FALSE(native.empty());
  EXPECT_EQ(native[0]["location"].get<std::string>().find("cuda.py"), std::string::npos) << native.dump(1);

  e2e::Result bad = e2e::run({e2e::kMemtrace, "report", "--by", "colour", dir + "/traces"});
  EXPECT_NE(bad.status, 0);
}

}  // namespace
