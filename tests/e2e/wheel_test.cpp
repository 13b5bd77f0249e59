// The wheel (scripts/wheel) as Python users get it: pip-installed with no index into a fresh venv,
// then used from a folder that is not the checkout, with nothing of the build on any path: the
// `memtrace` command pip put on PATH records a Python program on the simulated device and reports
// it, and `import memtrace` finds its bundle. Its platform tag states the glibc floor the shipped
// binaries really need.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

#include "harness.h"

namespace {

namespace fs = std::filesystem;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class Wheel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (e2e::kSanitized) return;
    dir_ = new std::string(e2e::temp_dir("wheel"));
    e2e::Result made = e2e::run({MEMTRACE_SOURCE_DIR "/scripts/wheel", "--from", MEMTRACE_BUILD_DIR, *dir_ + "/dist"});
    made_ = new e2e::Result(made);
    std::smatch m;
    if (std::regex_search(made.out, m, std::regex("wheel: (\\S+\\.whl) .*needs GLIBC_2\\.([0-9]+) or newer")))
      wheel_ = new std::string(m[1]), floor_ = std::stoi(m[2]);
  }
  void SetUp() override {
    if (e2e::kSanitized) GTEST_SKIP() << e2e::kNotShippedWhenSanitized;
    ASSERT_TRUE(wheel_) << made_->out << made_->err;
  }

  // Runs SCRIPT with sh in FOLDER, with only VENV's bin, /usr/bin and /bin on PATH and nothing else
  // of this environment.
  static e2e::Result in_clean_shell(const std::string& venv, const std::string& folder, const std::string& script) {
    return e2e::run({"/usr/bin/env", "-i", "PATH=" + venv + "/bin:/usr/bin:/bin", "HOME=" + *dir_, "/bin/sh", "-c",
                     "cd '" + folder + "' && " + script});
  }
  static e2e::Result make_venv(const std::string& python, const std::string& venv) {
    e2e::Result made = e2e::run({python, "-m", "venv", venv});
    if (made.status != 0) return made;
    return e2e::run({venv + "/bin/python", "-m", "pip", "install", "--no-index", "--no-deps", "-q", *wheel_});
  }

  static std::string* dir_;
  static e2e::Result* made_;
  static std::string* wheel_;
  static int floor_;
};
std::string* Wheel::dir_ = nullptr;
e2e::Result* Wheel::made_ = nullptr;
std::string* Wheel::wheel_ = nullptr;
int Wheel::floor_ = 0;

TEST_F(Wheel, InstallsIntoAFreshVenvAndRecordsFromAnotherFolder) {
  const std::string venv = *dir_ + "/venv", project = *dir_ + "/project";
  e2e::Result installed = make_venv("/usr/bin/python3", venv);
  ASSERT_EQ(installed.status, 0) << installed.out << installed.err;
  fs::create_directories(project);
  fs::copy_file(e2e::python_sample_path("train_loop.py"), project + "/train.py");
  fs::copy_file(e2e::python_sample_path("cuda.py"), project + "/cuda.py");

  e2e::Result which = in_clean_shell(venv, project, "command -v memtrace && memtrace --version");
  ASSERT_EQ(which.status, 0) << which.err;
  EXPECT_TRUE(contains(which.out, venv + "/bin/memtrace\n")) << which.out;
  EXPECT_TRUE(contains(which.out, "memtrace " MEMTRACE_VERSION)) << which.out;

  e2e::Result run = in_clean_shell(venv, project, "memtrace run --sim -o out -- python train.py 3");
  ASSERT_EQ(run.status, 0) << run.out << run.err;
  EXPECT_TRUE(contains(run.err, "memtrace: 1 traced process, traces in out/")) << run.err;
  e2e::Result report = in_clean_shell(venv, project, "memtrace report --json out");
  ASSERT_EQ(report.status, 0) << report.err;
  nlohmann::json p = nlohmann::json::parse(report.out)["processes"][0];
  EXPECT_EQ(p["command"], nlohmann::json({"python", "train.py", "3"}));
  EXPECT_EQ(p["events"]["cudaMalloc"]["calls"], p["events"]["cudaFree"]["calls"]) << p["events"].dump();
  EXPECT_GT(p["devices"][0]["peak_reserved_bytes"].get<uint64_t>(), 0u);
  EXPECT_TRUE(contains(p["devices"][0]["top_sites_at_peak"].dump(), "cuda.py")) << p["devices"][0].dump(2);

  // memtrace.record from the installed package, on the bundle's simulated device.
  fs::copy_file(e2e::python_sample_path("record_block.py"), project + "/record_block.py");
  e2e::Result recorded = in_clean_shell(
      venv, project,
      "LD_LIBRARY_PATH=$(python -c 'import memtrace, os; print(os.path.join(memtrace.bundle_dir(), \"lib\", "
      "\"sim\"))') python record_block.py inside && memtrace report --json inside");
  ASSERT_EQ(recorded.status, 0) << recorded.out << recorded.err;
  EXPECT_TRUE(contains(recorded.out, "\"recording stopped (memtrace.stop)\"")) << recorded.out;

  // The package finds the executable in its own bundle, inside the venv.
  e2e::Result imported = in_clean_shell(venv, "/", "python -c 'import memtrace; print(memtrace.executable())'");
  ASSERT_EQ(imported.status, 0) << imported.err;
  EXPECT_EQ(imported.out.rfind(venv + "/lib/", 0), 0u) << imported.out;
  EXPECT_TRUE(contains(imported.out, "/site-packages/memtrace/_bundle/bin/memtrace")) << imported.out;
}

// py3-none: one wheel for every CPython 3 it supports (3.8 and later, whose pip reads manylinux_2_N).
TEST_F(Wheel, InstallsIntoEveryCPython) {
  for (const e2e::Python& python : e2e::pythons()) {
    if (python.minor < 8) continue;
    const std::string venv =
        *dir_ + "/venv-" + std::to_string(python.minor) + "-" + std::to_string(&python - &e2e::pythons()[0]);
    e2e::Result installed = make_venv(python.path, venv);
    ASSERT_EQ(installed.status, 0) << python.path << ": " << installed.out << installed.err;
    e2e::Result version = in_clean_shell(venv, "/", "python -m memtrace --version && memtrace --version");
    EXPECT_EQ(version.status, 0) << python.path << ": " << version.err;
    EXPECT_EQ(version.out, "memtrace " MEMTRACE_VERSION "\nmemtrace " MEMTRACE_VERSION "\n") << python.path;
  }
}

// The tag's glibc is the newest version any shipped binary imports, read again here from the
// installed files.
TEST_F(Wheel, ItsPlatformTagIsTheGlibcItsBinariesNeed) {
  EXPECT_TRUE(contains(*wheel_, "-py3-none-manylinux_2_" + std::to_string(floor_) + "_x86_64.whl")) << *wheel_;
  const std::string unpacked = *dir_ + "/unpacked";
  e2e::Result unzip = e2e::run({"/usr/bin/python3", "-m", "zipfile", "-e", *wheel_, unpacked});
  ASSERT_EQ(unzip.status, 0) << unzip.err;
  int newest = 0;
  size_t binaries = 0;
  for (const auto& entry : fs::recursive_directory_iterator(unpacked)) {
    if (!entry.is_regular_file()) continue;
    e2e::Result symbols = e2e::run({"/usr/bin/objdump", "-T", entry.path().string()});
    if (symbols.status != 0) continue;  // not an ELF file
    ++binaries;
    std::regex version("GLIBC_2\\.([0-9]+)");
    for (auto it = std::sregex_iterator(symbols.out.begin(), symbols.out.end(), version); it != std::sregex_iterator();
         ++it)
      newest = std::max(newest, std::stoi((*it)[1]));
  }
  EXPECT_GE(binaries, 5u) << "the executable, the injector, its dependencies, the simulated device";
  EXPECT_EQ(newest, floor_);
}

// The pytest plugin comes with the wheel (its pytest11 entry point): `pytest --memtrace` in a venv
// that sees Debian's pytest, and -p no:memtrace turns it off.
TEST_F(Wheel, ThePytestPluginIsInstalledWithIt) {
  const std::string venv = *dir_ + "/venv-pytest", project = *dir_ + "/pytest-project";
  e2e::Result made = e2e::run({"/usr/bin/python3", "-m", "venv", "--system-site-packages", venv});
  ASSERT_EQ(made.status, 0) << made.err;
  e2e::Result installed =
      e2e::run({venv + "/bin/python", "-m", "pip", "install", "--no-index", "--no-deps", "-q", *wheel_});
  ASSERT_EQ(installed.status, 0) << installed.out << installed.err;
  fs::create_directories(project);
  fs::copy_file(MEMTRACE_E2E_SOURCE "/pytest_project/test_gpu.py", project + "/test_gpu.py");
  fs::copy_file(e2e::python_sample_path("cuda.py"), project + "/cuda.py");
  const std::string sim =
      "LD_LIBRARY_PATH=$(python -c 'import memtrace, os; print(os.path.join(memtrace.bundle_dir(), \"lib\", "
      "\"sim\"))') ";
  e2e::Result on =
      in_clean_shell(venv, project, sim + "python -m pytest -q -p no:cacheprovider --memtrace test_gpu.py");
  EXPECT_EQ(on.status, 1) << on.out << on.err;
  EXPECT_TRUE(contains(on.out, "3 failed, 1 passed")) << on.out;
  EXPECT_TRUE(contains(on.out, "over its limit of 16.0 MiB (gpu_limit_memory)")) << on.out;
  e2e::Result off = in_clean_shell(
      venv, project, sim + "python -m pytest -q -p no:cacheprovider -p no:memtrace --memtrace test_gpu.py");
  EXPECT_EQ(off.status, 4) << off.out << off.err;
  EXPECT_TRUE(contains(off.err, "unrecognized arguments: --memtrace")) << off.err;
}

}  // namespace
