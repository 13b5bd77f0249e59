// memtrace's pytest plugin (injector/python/memtrace/pytest_plugin.py) as users run it, with
// Debian's pytest on the simulated device: the markers fail and pass where they should, with the
// message a user reads; a test that fails on its own keeps its failure; -x; without --memtrace the
// markers do nothing. (The wheel's test runs it through its pytest11 entry point, and -p no:memtrace.)
#include <gtest/gtest.h>

#include "harness.h"

namespace {

using nlohmann::json;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

const std::string kProject = MEMTRACE_E2E_SOURCE "/pytest_project";

e2e::Result pytest(const std::string& dir, std::vector<std::string> args) {
  std::vector<std::string> argv = {
      "/usr/bin/python3", "-m",        "pytest", "-p", "memtrace.pytest_plugin", "-q", "-p",
      "no:cacheprovider", "--rootdir", kProject};
  argv.insert(argv.end(), args.begin(), args.end());
  return e2e::run(argv,
                  e2e::with_sanitizer_runtime({"PYTHONPATH=" MEMTRACE_BUILD_DIR "/lib/python:" MEMTRACE_PYTHON_SAMPLES
                                               ":" MEMTRACE_SIM_DIR "/torch/site-packages",
                                               "LD_LIBRARY_PATH=" MEMTRACE_SIM_DIR, "MEMTRACE_TEST_OUT=" + dir}));
}

TEST(PytestPlugin, MarkersFailAndPassWhereTheyShould) {
  const std::string dir = e2e::temp_dir("pytest");
  e2e::Result r = pytest(dir, {"--memtrace", "--memtrace-dir", dir + "/traces", kProject + "/test_gpu.py"});
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "3 failed, 1 passed")) << r.out;
  EXPECT_TRUE(contains(r.out,
                       "memtrace: the test held 32.0 MiB of reserved memory at its peak, over its limit of 16.0 MiB "
                       "(gpu_limit_memory)"))
      << r.out;
  EXPECT_TRUE(contains(r.out, "24.0 MiB  cuda.py:35 in malloc ← test_gpu.py:17 in test_over_limit")) << r.out;
  EXPECT_TRUE(contains(r.out,
                       "memtrace: the test allocated 4.00 MiB of reserved memory that it still holds at its end, "
                       "over its limit of 1.00 MiB (gpu_limit_leaks)"))
      << r.out;
  EXPECT_TRUE(contains(r.out, "test_gpu.py:29: ValueError")) << r.out;  // its own failure, kept
  EXPECT_FALSE(contains(r.out, "test_within_limit - ")) << r.out;
  EXPECT_TRUE(contains(r.out, "memtrace: the session's trace is in " + dir + "/traces")) << r.out;
  e2e::Result report = e2e::run({e2e::kMemtrace, "report", "--json", dir + "/traces"});
  ASSERT_EQ(report.status, 0) << report.err;
  EXPECT_EQ(json::parse(report.out)["processes"][0]["end_reason"], "recording stopped (memtrace.stop)");
}

TEST(PytestPlugin, PyTorchsTensorsAreMeasuredAndItsCacheIsNoLeak) {
  const std::string dir = e2e::temp_dir("pytest-torch");
  e2e::Result r = pytest(dir, {"--memtrace", "--memtrace-dir", dir + "/traces", kProject + "/test_torch_gpu.py"});
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "2 failed, 1 passed")) << r.out;
  EXPECT_TRUE(contains(r.out, "4.00 MiB of allocated memory (PyTorch's tensors) at its peak")) << r.out;
  EXPECT_TRUE(contains(r.out, "4.00 MiB  test_torch_gpu.py:20 in test_tensor_leak")) << r.out;
  EXPECT_FALSE(contains(r.out, "test_cache_is_not_a_leak")) << r.out;
}

TEST(PytestPlugin, StopsAtTheFirstFailureWithACompleteTrace) {
  const std::string dir = e2e::temp_dir("pytest-x");
  e2e::Result r = pytest(dir, {"-x", "--memtrace", "--memtrace-dir", dir + "/traces", kProject + "/test_gpu.py"});
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "1 failed, 1 passed")) << r.out;
  e2e::Result report = e2e::run({e2e::kMemtrace, "report", "--json", dir + "/traces"});
  ASSERT_EQ(report.status, 0) << report.err;
  EXPECT_EQ(json::parse(report.out)["processes"][0]["complete"], true);
}

TEST(PytestPlugin, WithoutMemtraceTheMarkersDoNothing) {
  const std::string dir = e2e::temp_dir("pytest-off");
  e2e::Result r = pytest(dir, {kProject + "/test_gpu.py"});
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "1 failed, 3 passed")) << r.out;
  EXPECT_FALSE(contains(r.out, "memtrace:")) << r.out;
}

}  // namespace
