// memtrace run must leave programs alone: their output and exit status, with and without CUDA,
// when they die, when they cannot start, and when there is no collector at all.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "harness.h"
#include "memtrace/ring/protocol.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

TEST(Run, ProgramWithoutCudaRunsUnchanged) {
  std::string dir = e2e::temp_dir("nocuda");
  e2e::Result plain = e2e::run({e2e::sample_path("no_cuda"), "x", "two words"});
  e2e::Result traced =
      e2e::run({e2e::kMemtrace, "run", "-o", dir + "/out", "--", e2e::sample_path("no_cuda"), "x", "two words"});
  EXPECT_EQ(plain.status, 3);
  EXPECT_EQ(traced.status, 3);
  EXPECT_EQ(traced.out, plain.out);
  EXPECT_NE(traced.err.find("never used CUDA"), std::string::npos) << traced.err;
  EXPECT_FALSE(fs::exists(dir + "/out")) << "an empty output folder was left behind";
}

TEST(Run, TrueExitsZero) {
  std::string dir = e2e::temp_dir("true");
  e2e::Result r = e2e::run({e2e::kMemtrace, "run", "-o", dir + "/out", "--", "/bin/true"});
  EXPECT_EQ(r.status, 0) << r.err;
}

TEST(Run, ExitStatusAndSignalsPassThrough) {
  std::string dir = e2e::temp_dir("status");
  EXPECT_EQ(e2e::run({e2e::kMemtrace, "run", "-o", dir + "/a", "--", "/bin/sh", "-c", "exit 7"}).status, 7);
  EXPECT_EQ(e2e::run({e2e::kMemtrace, "run", "-o", dir + "/b", "--", "/bin/sh", "-c", "kill -TERM $$"}).status,
            128 + SIGTERM);
}

TEST(Run, ProgramKilledMidRunLeavesACompleteTrace) {
  std::string dir = e2e::temp_dir("killed");
  e2e::Result r = e2e::run_sample(dir, "train_loop", {"--steps", "10", "--kill-at-step", "3"});
  ASSERT_EQ(r.status, 128 + SIGKILL) << r.err;
  auto ledgers = e2e::read_ledgers(dir);
  ASSERT_EQ(ledgers.size(), 1u);
  const e2e::Ledger& ledger = ledgers.begin()->second;
  json p = e2e::report_json(dir + "/traces")["processes"][0];
  EXPECT_EQ(p["exit_status"], 128 + SIGKILL);
  EXPECT_NE(p["end_reason"].get<std::string>().find("killed by signal 9"), std::string::npos) << p["end_reason"];
  for (const auto& [api, counts] : ledger.apis)
    EXPECT_EQ(p["events"][api]["calls"].get<uint64_t>(), counts.calls) << api;
  EXPECT_EQ(p["devices"][0]["peak_reserved_bytes"].get<uint64_t>(), ledger.peak.at(0));
  EXPECT_EQ(p["devices"][0]["live_at_exit_bytes"].get<uint64_t>(), ledger.live.at(0));
}

TEST(Run, UserErrorsGetOneLineAndAnExitCode) {
  std::string dir = e2e::temp_dir("errors");
  e2e::Result missing = e2e::run({e2e::kMemtrace, "run", "-o", dir + "/a", "--", "no-such-command-anywhere"});
  EXPECT_EQ(missing.status, 127);
  EXPECT_NE(missing.err.find("command not found"), std::string::npos) << missing.err;
  EXPECT_FALSE(fs::exists(dir + "/a"));

  std::string not_executable = dir + "/data.txt";
  std::ofstream(not_executable) << "hello\n";
  e2e::Result denied = e2e::run({e2e::kMemtrace, "run", "-o", dir + "/b", "--", not_executable});
  EXPECT_EQ(denied.status, 126) << denied.err;

  e2e::Result no_command = e2e::run({e2e::kMemtrace, "run"});
  EXPECT_NE(no_command.status, 0);

  e2e::Result bad_dir = e2e::run({e2e::kMemtrace, "run", "-o", not_executable + "/sub", "--", "/bin/true"});
  EXPECT_EQ(bad_dir.status, 125);
  EXPECT_NE(bad_dir.err.find("cannot create output folder"), std::string::npos) << bad_dir.err;

  e2e::Result bad_size = e2e::run({e2e::kMemtrace, "run", "--sim", "--sim-capacity", "lots", "--", "/bin/true"});
  EXPECT_EQ(bad_size.status, 125);
  EXPECT_NE(bad_size.err.find("not a size"), std::string::npos) << bad_size.err;
}

TEST(Run, DefaultOutputFolderIsPrivate) {
  std::string dir = e2e::temp_dir("default");
  std::string cwd = fs::current_path();
  fs::current_path(dir);
  e2e::Result r = e2e::run({e2e::kMemtrace, "run", "--sim", "--", e2e::sample_path("leak"), "--iterations", "2"});
  fs::current_path(cwd);
  ASSERT_EQ(r.status, 0) << r.err;
  std::vector<fs::path> folders;
  for (const auto& e : fs::directory_iterator(dir)) folders.push_back(e.path());
  ASSERT_EQ(folders.size(), 1u);
  EXPECT_EQ(folders[0].filename().string().rfind("memtrace-", 0), 0u) << folders[0];
  struct stat st {};
  ASSERT_EQ(::stat(folders[0].c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  for (const auto& e : fs::directory_iterator(folders[0])) {
    ASSERT_EQ(::stat(e.path().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u) << e.path();
  }
}

// `-o out/` (as people type it, and as memtrace.record("out/") passes it) is the new folder out,
// private as memtrace makes it, its parents made as needed; not "out exists" (it did not).
TEST(Run, AnOutputFolderNamedWithATrailingSlashIsMade) {
  const std::string base = e2e::temp_dir("slash");
  for (const std::string& dir : {base + "/out/", base + "/a/b/out//"}) {
    e2e::Result r =
        e2e::run({e2e::kMemtrace, "run", "--sim", "-o", dir, "--", e2e::sample_path("leak"), "--iterations", "2"});
    ASSERT_EQ(r.status, 0) << dir << ": " << r.err;
    struct stat st {};
    ASSERT_EQ(::stat(dir.c_str(), &st), 0) << dir;
    EXPECT_EQ(st.st_mode & 0777, 0700u) << dir;
    EXPECT_EQ(e2e::report_json(dir)["processes"].size(), 1u) << dir;
  }
}

// The injector without a collector (no socket, or one nobody listens on) changes nothing.
TEST(Injector, WithoutCollectorIsPassThrough) {
  const std::string sim = std::string("LD_LIBRARY_PATH=") + MEMTRACE_SIM_DIR;
  e2e::Result plain = e2e::run({e2e::sample_path("train_loop"), "--steps", "2"}, {sim});
  ASSERT_EQ(plain.status, 0) << plain.err;
  for (const std::string socket : {"", "MEMTRACE_SOCKET=/nonexistent/socket"}) {
    const char* first = std::getenv("MEMTRACE_PRELOAD_FIRST");  // a sanitizer's runtime (scripts/sanitize)
    std::vector<std::string> env{
        sim, std::string("LD_PRELOAD=") + (first && *first ? std::string(first) + ":" : "") + MEMTRACE_INJECTOR};
    if (!socket.empty()) env.push_back(socket);
    e2e::Result preloaded = e2e::run({e2e::sample_path("train_loop"), "--steps", "2"}, env);
    EXPECT_EQ(preloaded.status, 0) << preloaded.err;
    auto strip_pid = [](std::string s) { return s.substr(s.find(",\"calls\"")); };
    EXPECT_EQ(strip_pid(preloaded.out), strip_pid(plain.out));
  }
}

TEST(Run, SignalSentToMemtraceReachesTheProgram) {
  std::string dir = e2e::temp_dir("forward");
  pid_t pid = ::fork();
  if (pid == 0) {
    std::string out = dir + "/log";
    if (!freopen(out.c_str(), "w", stderr)) _exit(126);
    ::execl(e2e::kMemtrace.c_str(), e2e::kMemtrace.c_str(), "run", "-o", (dir + "/out").c_str(), "--", "/bin/sh", "-c",
            "echo started >&2; exec sleep 30", static_cast<char*>(nullptr));
    _exit(127);
  }
  // memtrace sets its handlers before it starts the program: the program's line says they are set.
  ASSERT_TRUE(e2e::wait_for_text(dir + "/log", "started")) << e2e::read_file(dir + "/log");
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM);
}

TEST(Report, BadInputGivesOneLine) {
  std::string dir = e2e::temp_dir("badinput");
  e2e::Result missing = e2e::run({e2e::kMemtrace, "report", dir + "/nothing"});
  EXPECT_EQ(missing.status, 2);
  EXPECT_NE(missing.err.find("does not exist"), std::string::npos) << missing.err;

  std::ofstream(dir + "/junk.memtrace") << "this is not a trace at all";
  e2e::Result junk = e2e::run({e2e::kMemtrace, "report", dir + "/junk.memtrace"});
  EXPECT_EQ(junk.status, 2);
  EXPECT_NE(junk.err.find("not a memtrace trace"), std::string::npos) << junk.err;

  fs::create_directories(dir + "/empty");
  e2e::Result empty = e2e::run({e2e::kMemtrace, "report", dir + "/empty"});
  EXPECT_EQ(empty.status, 2);
  EXPECT_NE(empty.err.find("no .memtrace traces"), std::string::npos) << empty.err;

  // Every command that reads traces or snapshots says the same: 2, in one line naming itself.
  const std::string nothing = dir + "/nothing";
  for (const std::vector<std::string>& command :
       std::vector<std::vector<std::string>>{{"report", nothing},
                                             {"peak", nothing},
                                             {"leaks", nothing},
                                             {"frag", nothing},
                                             {"timeline", nothing},
                                             {"diff", nothing, nothing},
                                             {"check", nothing, "--max-peak", "1GiB"},
                                             {"verify", nothing},
                                             {"snapshot", nothing},
                                             {"export", "--format", "jsonl", "-o", dir + "/out.jsonl", nothing},
                                             {"export", "--format", "folded", "-o", dir + "/out.folded", nothing},
                                             {"export", "--format", "memory-viz", "-o", dir + "/out.pickle", nothing},
                                             {"html", nothing, "-o", dir + "/out.html"},
                                             {"explain", nothing, "--model", "gpt2"}}) {
    std::vector<std::string> argv = {e2e::kMemtrace};
    argv.insert(argv.end(), command.begin(), command.end());
    e2e::Result r = e2e::run(argv);
    EXPECT_EQ(r.status, 2) << command[0] << ": " << r.err;
    EXPECT_EQ(r.err.rfind("memtrace " + command[0] + ": ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << command[0] << ": " << r.err;
  }
}

TEST(Report, CutTraceReportsWhatItHolds) {
  std::string dir = e2e::temp_dir("cut");
  ASSERT_EQ(e2e::run_sample(dir, "train_loop", {"--steps", "2000"}).status, 0);  // several chunks
  fs::path trace;
  for (const auto& e : fs::directory_iterator(dir + "/traces")) trace = e.path();
  fs::resize_file(trace, fs::file_size(trace) * 9 / 10);
  e2e::Result r = e2e::run({e2e::kMemtrace, "report", "--json", trace.string()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("trace ends early at byte"), std::string::npos) << r.err;
  json p = json::parse(r.out)["processes"][0];
  EXPECT_FALSE(p["complete"].get<bool>());
  EXPECT_GT(p["events"]["cudaMalloc"]["calls"].get<int>(), 0);
}

}  // namespace

namespace {

// Starts `memtrace run --sim -o DIR/traces OPTIONS -- threads ...` with a small ring, its output
// (and the program's) in DIR/out and DIR/err; returns memtrace's pid.
// `memtrace run --sim` of COMMAND in the background, with a ring of 512 slots (full within a few
// hundred events) and a ledger per process in DIR; its output in DIR/out and DIR/err.
pid_t start_traced(const std::string& dir, const std::vector<std::string>& options,
                   const std::vector<std::string>& command) {
  fs::create_directories(dir);
  pid_t pid = ::fork();
  if (pid == 0) {
    if (!freopen((dir + "/out").c_str(), "w", stdout) || !freopen((dir + "/err").c_str(), "w", stderr)) _exit(126);
    ::setenv("MEMTRACE_RING_BYTES", "65536", 1);
    ::setenv("MEMTRACE_SIM_LEDGER", (dir + "/ledger-%p.txt").c_str(), 1);
    std::vector<std::string> args{e2e::kMemtrace, "run", "--sim", "-o", dir + "/traces"};
    args.insert(args.end(), options.begin(), options.end());
    args.emplace_back("--");
    args.insert(args.end(), command.begin(), command.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

pid_t start_threads(const std::string& dir, const std::vector<std::string>& options, const char* iterations,
                    const std::string& threads = "2", const std::vector<std::string>& more = {}) {
  std::vector<std::string> command{e2e::sample_path("threads"), "--threads", threads, "--iterations", iterations};
  command.insert(command.end(), more.begin(), more.end());
  return start_traced(dir, options, command);
}

int wait_status(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The traced program's pid, once it has made its first CUDA call: the simulated device's ledger,
// made then, is named after it. Waits as long as that takes (a sanitizer's build starts slowly).
pid_t wait_for_program(const std::string& dir) {
  for (;;) {
    for (const auto& e : fs::directory_iterator(dir))
      if (const std::string name = e.path().filename().string(); name.rfind("ledger-", 0) == 0)
        return std::stoi(name.substr(7));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// Waits until PID has ended (gone, or a zombie nobody reaped yet), as long as that takes.
void wait_until_ended(pid_t pid) {
  const std::string stat = "/proc/" + std::to_string(pid) + "/stat";
  for (;;) {
    const std::string text = e2e::read_file(stat);
    const size_t paren = text.rfind(')');
    if (paren == std::string::npos || text.compare(paren, 4, ") Z ") == 0) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

uint64_t ledger_calls(const std::string& dir) {
  uint64_t calls = 0;
  for (const auto& [pid, ledger] : e2e::read_ledgers(dir))
    for (const auto& [api, counts] : ledger.apis) calls += counts.calls;
  return calls;
}

TEST(Collector, StalledPastTheBoundTheProgramRunsOnAndLossesAreCounted) {
  std::string dir = e2e::temp_dir("stalled");
  pid_t memtrace = start_threads(dir, {"--max-stall", "0.3s"}, "60000");
  wait_for_program(dir);
  // Stopped from the program's first call to its end: its ring (512 slots) fills, it waits 0.3 s,
  // then runs on, counting what it cannot publish.
  ::kill(memtrace, SIGSTOP);
  const bool ended = e2e::wait_for_text(dir + "/out", "memtrace-sample:");
  ::kill(memtrace, SIGCONT);
  ASSERT_TRUE(ended) << e2e::read_file(dir + "/err");
  ASSERT_EQ(wait_status(memtrace), 0);
  json p = e2e::report_json(dir + "/traces")["processes"][0];
  uint64_t dropped = p["dropped_events"], recorded = p["events_total"];
  EXPECT_GT(dropped, 0u) << "the stop outlasted --max-stall";
  EXPECT_EQ(recorded + dropped, ledger_calls(dir)) << "every event is in the trace or counted as lost";
  e2e::Result text = e2e::run({e2e::kMemtrace, "report", dir + "/traces"});
  EXPECT_NE(text.out.find("WARNING: " + std::to_string(dropped) + " events were lost"), std::string::npos) << text.out;
}

TEST(Collector, ResumedWithinTheBoundNothingIsLost) {
  std::string dir = e2e::temp_dir("resumed");
  pid_t memtrace = start_threads(dir, {"--max-stall", "20s"}, "30000");
  wait_for_program(dir);
  ::kill(memtrace, SIGSTOP);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ::kill(memtrace, SIGCONT);
  ASSERT_EQ(wait_status(memtrace), 0);
  json p = e2e::report_json(dir + "/traces")["processes"][0];
  EXPECT_EQ(p["dropped_events"], 0);
  EXPECT_EQ(p["events_total"].get<uint64_t>(), ledger_calls(dir));
}

TEST(Collector, KilledTheProgramRunsToItsEndUnharmed) {
  std::string dir = e2e::temp_dir("collectorkilled");
  pid_t memtrace = start_threads(dir, {}, "60000");
  const pid_t program = wait_for_program(dir);
  ::kill(memtrace, SIGKILL);
  wait_status(memtrace);
  // The program, now an orphan, finishes on its own (it does not wait --max-stall per event)
  // and prints its account as it would have without memtrace.
  wait_until_ended(program);
  const std::string out = e2e::read_file(dir + "/out");
  EXPECT_NE(out.find("\"cudaMalloc\":30000"), std::string::npos) << out;  // 2 threads × 60000 / 4
}

}  // namespace

namespace {

TEST(Signals, InterruptReachesTheProgramItsHandlersRunAndTheTraceIsFinished) {
  std::string dir = e2e::temp_dir("sigint");
  fs::create_directories(dir);
  pid_t pid = ::fork();
  if (pid == 0) {
    if (!freopen((dir + "/out").c_str(), "w", stdout) || !freopen((dir + "/err").c_str(), "w", stderr)) _exit(126);
    ::setenv("MEMTRACE_SIM_LEDGER", (dir + "/ledger-%p.txt").c_str(), 1);
    ::execl(e2e::kMemtrace.c_str(), e2e::kMemtrace.c_str(), "run", "--sim", "-o", (dir + "/traces").c_str(), "--",
            e2e::sample_path("signals").c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  // The program says when its handlers are set and it holds memory.
  ASSERT_TRUE(e2e::wait_for_text(dir + "/err", "signals: running")) << e2e::read_file(dir + "/err");
  ::kill(pid, SIGINT);  // as `kill -INT`; Ctrl-C signals the whole group and reaches the program itself
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the program's own handler stopped it cleanly";
  json p = e2e::report_json(dir + "/traces")["processes"][0];
  EXPECT_TRUE(p["complete"].get<bool>());
  EXPECT_EQ(p["exit_status"], 0);
  auto ledger = e2e::read_ledgers(dir).begin()->second;
  EXPECT_EQ(p["events"]["cudaMalloc"]["calls"].get<uint64_t>(), ledger.apis["cudaMalloc"].calls);
  EXPECT_EQ(p["devices"][0]["live_at_exit_bytes"], 0);
}

}  // namespace

namespace {

TEST(Run, RedactedArgumentsNeverReachTheTrace) {
  std::string dir = e2e::temp_dir("redact");
  // Uncompressed, so that looking for the argument's bytes in the files means something.
  ASSERT_EQ(e2e::run_sample(dir, "leak", {"--iterations", "2"}, {"--redact-args", "--compress", "0"}).status, 0);
  json p = e2e::report_json(dir + "/traces")["processes"][0];
  EXPECT_EQ(p["command"], json({e2e::sample_path("leak"), "$1", "$2"}));
  for (const auto& e : fs::directory_iterator(dir + "/traces")) {
    std::ifstream in(e.path(), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(bytes.find("--iterations"), std::string::npos) << e.path();
  }
}

TEST(Run, EnvironmentValuesNeverReachTheTrace) {
  std::string dir = e2e::temp_dir("environment");
  const std::string secret = "memtrace-test-secret-" + std::to_string(::getpid());
  e2e::Result r = e2e::run({e2e::kMemtrace, "run", "--sim", "--compress", "0", "-o", dir + "/traces", "--",
                            e2e::sample_path("leak"), "--iterations", "2"},
                           {"MEMTRACE_TEST_SECRET=" + secret});
  ASSERT_EQ(r.status, 0) << r.err;
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir + "/traces")) {
    std::ifstream in(e.path(), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(bytes.find(secret), std::string::npos) << e.path();
    ++files;
  }
  EXPECT_GT(files, 0u);
}

}  // namespace

namespace {

struct Ending {
  std::string how;
  int status;
};

class Endings : public ::testing::TestWithParam<Ending> {};

// However the program ends, the trace holds every call the device counted, and says how it ended.
TEST_P(Endings, TraceHoldsEveryCallTheDeviceCounted) {
  std::string dir = e2e::temp_dir(GetParam().how);
  e2e::Result r = e2e::run_sample(dir, "endings", {GetParam().how});
  ASSERT_EQ(r.status, GetParam().status) << r.err;
  auto ledgers = e2e::read_ledgers(dir);
  ASSERT_EQ(ledgers.size(), 1u);
  const e2e::Ledger& ledger = ledgers.begin()->second;
  json p = e2e::report_json(dir + "/traces")["processes"][0];
  EXPECT_TRUE(p["complete"].get<bool>());
  EXPECT_EQ(p["exit_status"], GetParam().status);
  EXPECT_EQ(p["incomplete_records"], 0);
  for (const auto& [api, counts] : ledger.apis) {
    EXPECT_EQ(p["events"][api]["calls"].get<uint64_t>(), counts.calls) << api;
    EXPECT_EQ(p["events"][api]["bytes"].get<uint64_t>(), counts.bytes) << api;
  }
  EXPECT_EQ(p["devices"][0]["live_at_exit_bytes"].get<uint64_t>(), ledger.live.at(0));
}

INSTANTIATE_TEST_SUITE_P(Ways, Endings,
                         ::testing::Values(Ending{"static", 0}, Ending{"thread-local", 0},
                                           Ending{"segv", 128 + SIGSEGV}, Ending{"abort", 128 + SIGABRT},
                                           Ending{"exit-thread", 7}),
                         [](const auto& info) {
                           std::string name = info.param.how;
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

}  // namespace

namespace {

TEST(Run, DiskFullSaysSoAndLeavesTheProgramAndTheTraceUsable) {
  std::string dir = e2e::temp_dir("diskfull");
  std::string small = dir + "/small";
  fs::create_directories(small);
  if (std::system(("mount -t tmpfs -o size=1m tmpfs " + small + " 2>/dev/null").c_str()) != 0)
    GTEST_SKIP() << "cannot mount a small tmpfs here (needs root)";
  e2e::Result r = e2e::run({e2e::kMemtrace, "run", "--sim", "--compress", "0", "-o", small + "/traces", "--",
                            e2e::sample_path("train_loop"), "--steps", "8000"});  // ~3 MB of chunks
  EXPECT_EQ(r.status, 0) << "the program is unharmed: " << r.err;
  EXPECT_NE(r.out.find("memtrace-sample:"), std::string::npos);
  EXPECT_NE(r.err.find("No space left on device"), std::string::npos) << r.err;
  e2e::Result report = e2e::run({e2e::kMemtrace, "report", "--json", small + "/traces"});
  EXPECT_EQ(report.status, 0) << report.err;
  if (report.status == 0) {
    json p = json::parse(report.out)["processes"][0];
    EXPECT_FALSE(p["complete"].get<bool>());
    EXPECT_GT(p["events_total"].get<uint64_t>(), 1000u) << "read up to where the disk filled";
  }
  EXPECT_EQ(std::system(("umount " + small).c_str()), 0);
}

}  // namespace

namespace {

TEST(Run, UmaskOpensUpWhatItSays) {
  std::string dir = e2e::temp_dir("umask");
  ASSERT_EQ(e2e::run_sample(dir, "leak", {"--iterations", "2"}, {"--umask", "027"}).status, 0);
  struct stat st {};
  ASSERT_EQ(::stat((dir + "/traces").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0750u);
  for (const auto& e : fs::directory_iterator(dir + "/traces")) {
    ASSERT_EQ(::stat(e.path().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0640u) << e.path();
  }
  EXPECT_EQ(e2e::run({e2e::kMemtrace, "run", "--umask", "9", "--", "/bin/true"}).status, 125);
}

}  // namespace

namespace {

// SIGKILL at random moments: whatever call each thread was in, the device's ledger never counts
// a call the trace lacks. Calls the process died inside are in the trace as interrupted.
TEST(Endings, KilledAtRandomMomentsNothingTheDeviceCountedIsMissing) {
  std::mt19937 rng(20261130);
  for (int round = 0; round < 6; ++round) {
    std::string dir = e2e::temp_dir("random-" + std::to_string(round));
    pid_t memtrace = start_threads(dir, {}, "1000000");
    const pid_t program = wait_for_program(dir);
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 400));  // a random moment of its run
    ::kill(program, SIGKILL);
    ASSERT_EQ(wait_status(memtrace), 128 + SIGKILL);
    const e2e::Ledger ledger = e2e::read_ledgers(dir).begin()->second;
    json p = e2e::report_json(dir + "/traces")["processes"][0];
    EXPECT_NE(p["end_reason"].get<std::string>().find("killed by signal 9"), std::string::npos);
    uint64_t interrupted = 0;
    for (const auto& [api, counts] : ledger.apis) {
      const json& traced = p["events"][api];
      uint64_t calls = traced.is_null() ? 0 : traced["calls"].get<uint64_t>();
      uint64_t cut = traced.is_null() ? 0 : traced["interrupted"].get<uint64_t>();
      interrupted += cut;
      EXPECT_LE(calls, counts.calls) << api << " in round " << round;
      EXPECT_LE(counts.calls, calls + cut) << api << " in round " << round << ": a call the device counted is missing";
    }
    EXPECT_LE(interrupted, 2u) << "two threads, at most one call each";
  }
}

// The calls each thread is inside when the process dies come from its in-call slot (the ring's
// header) or, for a thread the table had no room for, from the record it published as it entered
// the call. Made certain here: with memtrace stopped, the ring fills and every thread waits for
// room inside a call; killed then, each call the device did must be in the trace, done or
// interrupted, and no call more.
void kill_while_every_thread_waits(const std::string& dir, const std::string& threads, uint64_t& interrupted) {
  pid_t memtrace = start_threads(dir, {"--max-stall", "600s"}, "100000000", threads, {"--together", "1"});
  const pid_t program = wait_for_program(dir);
  ::kill(memtrace, SIGSTOP);
  // Waits until every thread waits for room in the ring: all of them started, and each seen once
  // sleeping in clock_nanosleep, as memtrace's producer does between looks for room (nothing else
  // in the sample sleeps, and with memtrace stopped no room comes: a thread seen there stays), or
  // waiting on a lock look after look, as threads do behind one that reports a module or a code
  // object (memtrace's locks: the call's record comes after them). The device's ledger standing
  // still says less: the last threads started may still be on their way into a call. But a lock
  // can also be the device's own: its ledger's, taken after the device did the call, to count it
  // (sim/ledger.cpp). A thread waiting there is not stuck (the ledger's holder goes on writing):
  // looks count only while the ledger stands still, else a thread killed there, inside a call the
  // device did and has not counted yet, is rightly interrupted in the trace and missing from the
  // ledger (seen under load: 32 of 528 threads).
  const size_t workers = std::stoul(threads);
  const fs::path tasks = "/proc/" + std::to_string(program) + "/task";
  const std::string ledger_file = dir + "/ledger-" + std::to_string(program) + ".txt";
  std::string ledger_text = e2e::read_file(ledger_file);
  std::map<std::string, int> looks_locked;  // by thread: looks in a row that found it on a lock
  std::set<std::string> waiting;
  while (waiting.size() < workers) {
    if (std::string now = e2e::read_file(ledger_file); now != ledger_text) {
      ledger_text = now;
      looks_locked.clear();
    }
    for (const auto& task : fs::directory_iterator(tasks)) {
      const std::string tid = task.path().filename().string();
      if (tid == std::to_string(program) || waiting.count(tid)) continue;  // the main thread joins them
      std::ifstream syscall(task.path() / "syscall");
      long number = -1;
      syscall >> number;
      looks_locked[tid] = number == SYS_futex ? looks_locked[tid] + 1 : 0;
      if (number == SYS_clock_nanosleep || looks_locked[tid] >= 5) waiting.insert(tid);
    }
    if (waiting.size() < workers) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(program, SIGKILL);
  ::kill(memtrace, SIGCONT);
  ASSERT_EQ(wait_status(memtrace), 128 + SIGKILL);
  const e2e::Ledger ledger = e2e::read_ledgers(dir).begin()->second;
  json p = e2e::report_json(dir + "/traces")["processes"][0];
  interrupted = 0;
  for (const auto& [api, counts] : ledger.apis) {
    const json& traced = p["events"][api];
    uint64_t calls = traced.is_null() ? 0 : traced["calls"].get<uint64_t>();
    uint64_t cut = traced.is_null() ? 0 : traced["interrupted"].get<uint64_t>();
    interrupted += cut;
    EXPECT_EQ(counts.calls, calls + cut) << api << ": each call the device did is in the trace, done or interrupted";
  }
  EXPECT_EQ(p["dropped_events"].get<uint64_t>(), 0u);
}

// A thread usually waits for room to publish its call's own record, which the process's death
// then interrupts. It may instead wait to publish a device memory sample it takes after its call's
// record is in (injector/device_query.cpp: the first allocation's, then one a millisecond): it dies
// inside a call that is whole, rightly not interrupted.
TEST(Endings, KilledWhileEveryThreadWaitsInsideACallTheCallsAreInTheTrace) {
  uint64_t interrupted = 0;
  kill_while_every_thread_waits(e2e::temp_dir("killed-waiting"), "2", interrupted);
  EXPECT_GE(interrupted, 1u) << "the threads died inside a call";
  EXPECT_LE(interrupted, 2u) << "two threads, at most one call each";
}

// More threads than the in-call table has slots (ring::kInCallSlots): those without one are
// followed by the records they publish as they enter a call. (Those usually wait for room to
// publish that record, before the device does the call: nothing of theirs is interrupted then.)
TEST(Endings, KilledWhileMoreThreadsThanInCallSlotsWaitTheCallsAreInTheTrace) {
  const std::string threads = std::to_string(memtrace::ring::kInCallSlots + 16);
  uint64_t interrupted = 0;
  kill_while_every_thread_waits(e2e::temp_dir("killed-waiting-many"), threads, interrupted);
  EXPECT_GE(interrupted, memtrace::ring::kInCallSlots / 2) << "most threads died inside a call";
}

// A thread that must tell the collector of a library it just loaded waits for ring room to do so
// when the collector is behind (stopped here). It must not hold the loader's lock meanwhile: every
// other thread that unwinds, looks its modules up or loads a library would wait for the collector
// too (memtrace's own stack walks among them, inside calls the device has not made yet).
TEST(Collector, AThreadWaitingToReportAModuleLeavesTheLoaderFree) {
  const std::string dir = e2e::temp_dir("loader-free");
  const std::string ready = dir + "/ready", go = dir + "/go", free = dir + "/loader-free";
  pid_t memtrace =
      start_traced(dir, {"--max-stall", "600s"},
                   {e2e::sample_path("loader_while_waiting"), ready, go, free, e2e::sample_path("libplugin_alloc.so")});
  while (!fs::exists(ready)) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ::kill(memtrace, SIGSTOP);
  std::ofstream(go) << "1\n";
  // The program walks its modules once both its threads wait for room; a minute without it is a hang.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!fs::exists(free) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const bool loader_was_free = fs::exists(free);
  ::kill(memtrace, SIGCONT);
  ASSERT_TRUE(loader_was_free) << "the program's dl_iterate_phdr waited for memtrace's collector";
  ASSERT_EQ(wait_status(memtrace), 0);
  // The module was reported, late: the allocation made in it names its frame.
  bool found = false;
  for (const json& e : e2e::exported_events(dir))
    if (e.value("api", "") == "cudaMalloc" && e["size"] == 8192 && !e["stack"].empty())
      found = e["stack"][0].value("function", "").find("plugin_internal_alloc") != std::string::npos &&
              e["stack"][0].value("module", "").ends_with("libplugin_alloc.so");
  EXPECT_TRUE(found) << "the allocation made in the plugin, with its frame";
  EXPECT_EQ(e2e::report_json(dir + "/traces")["processes"][0]["dropped_events"].get<uint64_t>(), 0u);
}

TEST(Collector, HostileProgramCannotCrashItOrWriteElsewhere) {
  std::string dir = e2e::temp_dir("hostile");
  e2e::Result r = e2e::run({e2e::kMemtrace, "run", "-o", dir + "/traces", "--", e2e::sample_path("hostile_client")});
  EXPECT_EQ(r.status, 5) << "the program's own status, with memtrace standing: " << r.err;
  EXPECT_NE(r.err.find("ignoring a connection"), std::string::npos) << r.err;
  for (const auto& e : fs::directory_iterator(dir)) EXPECT_EQ(e.path().filename(), "traces") << e.path();
  // What it accepted reads as a trace; the garbage was refused record by record.
  e2e::Result report = e2e::run({e2e::kMemtrace, "report", "--json", dir + "/traces"});
  EXPECT_EQ(report.status, 0) << report.err;
}

}  // namespace
