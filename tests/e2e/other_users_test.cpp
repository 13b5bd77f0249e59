// Another user on the machine (GPU machines are shared: login nodes, workstations, a /tmp that is
// everyone's) cannot read a run, write through it or stop it. Each case is tried as that user
// would, as `nobody` through setpriv: these tests need root (CI's user) to be two users, and say
// so and skip elsewhere.
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "harness.h"

namespace fs = std::filesystem;

namespace {

using e2e::Background;
using e2e::read_file;
using e2e::wait_for_text;

constexpr uid_t kNobody = 65534;

bool can_be_two_users() { return ::geteuid() == 0 && ::access("/usr/bin/setpriv", X_OK) == 0; }
#define NEEDS_TWO_USERS() \
  if (!can_be_two_users()) GTEST_SKIP() << "acting as a second user (nobody, through setpriv) takes root"

std::vector<std::string> as_nobody(std::vector<std::string> argv) {
  argv.insert(argv.begin(), {"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"});
  return argv;
}
e2e::Result sh_as_nobody(const std::string& script) { return e2e::run(as_nobody({"/bin/sh", "-c", script})); }

// A folder anyone may write in, as /tmp is (1777).
std::string shared_folder(const std::string& name) {
  std::string dir = e2e::temp_dir(name);
  ::chmod(dir.c_str(), 01777);
  return dir;
}

struct stat stat_of(const std::string& path) {
  struct stat st {};
  ::lstat(path.c_str(), &st);
  return st;
}

std::vector<std::string> sim_env(std::vector<std::string> env = {}) {
  env.push_back("LD_LIBRARY_PATH=" MEMTRACE_SIM_DIR);
  return e2e::with_sanitizer_runtime(env);
}

// The entries of DIR whose names begin with PREFIX.
std::vector<std::string> entries(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind(prefix, 0) == 0) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

// A finished run of the training sample in DIR/traces (the current user's).
std::string recorded_run(const std::string& dir, const std::vector<std::string>& options = {}) {
  e2e::Result r = e2e::run_sample(dir, "train_loop", {"--steps", "3"}, options);
  EXPECT_EQ(r.status, 0) << r.err;
  return dir + "/traces";
}

// 1 and 7: root's memtrace attach of another user's process. That user cannot block the attach
// by making its rendezvous first, gets no folder of root's (nothing to swap for a link), and its
// other processes that reach root's collector are turned away at once; detach still works.
TEST(AnotherUser, RootsAttachGivesTheProcesssUserNothingToSwapAndTakesNoOneElse) {
  NEEDS_TWO_USERS();
  // A short TMPDIR (socket paths are short), anyone's, as /tmp is.
  const std::string dir = e2e::temp_dir("attach"), tmp = "/tmp/mt-" + std::to_string(::getpid());
  fs::remove_all(tmp);
  fs::create_directory(tmp);
  ::chmod(tmp.c_str(), 01777);
  struct RemoveAtEnd {
    std::string path;
    ~RemoveAtEnd() { fs::remove_all(path); }
  } remove_tmp{tmp};
  const std::string uid = std::to_string(::geteuid());
  // Made first by the other user: the names an attach of root's used to take.
  ASSERT_EQ(sh_as_nobody("mkdir -m 700 " + tmp + "/memtrace-attached-" + uid + " " + tmp + "/memtrace-attached-" + uid +
                         "-AAAAAA")
                .status,
            0);
  const std::vector<std::string> root_env = {"TMPDIR=" + tmp, "XDG_RUNTIME_DIR="};
  const std::string stop = dir + "/stop";
  Background job(dir, "job", as_nobody({e2e::sample_path("long_running"), stop}), sim_env({"TMPDIR=" + tmp}));
  ASSERT_TRUE(wait_for_text(job.out, "ready pid", job.pid)) << read_file(job.err);
  const std::string pid = std::to_string(job.pid);
  Background attach(dir, "attach", {e2e::kMemtrace, "attach", pid, "-o", dir + "/traces"}, root_env);
  ASSERT_TRUE(wait_for_text(attach.err, "to stop", attach.pid)) << read_file(attach.err);

  // Every folder of root's attach is root's, and no one else may change it.
  std::vector<std::string> folders;
  for (const std::string& f : entries(tmp, "memtrace-"))
    if (stat_of(f).st_uid == 0) folders.push_back(f);
  ASSERT_GE(folders.size(), 2u) << "the collector's socket folder and attach's own";
  std::string control;
  for (const std::string& f : folders) {
    EXPECT_TRUE(S_ISDIR(stat_of(f).st_mode)) << f;
    EXPECT_EQ(stat_of(f).st_mode & 022, 0u) << f;
    EXPECT_NE(sh_as_nobody("rm " + f + "/control " + f + "/report " + f + "/" + pid).status, 0)
        << f << ": the other user emptied it";
    EXPECT_NE(sh_as_nobody("mv " + f + " " + f + ".swapped && ln -s /etc " + f).status, 0)
        << f << ": the other user swapped it for a link";
    if (fs::exists(fs::symlink_status(f + "/control"))) control = f + "/control";
  }
  ASSERT_FALSE(control.empty());
  // Another process of the same user at root's collector: an introduction and a silent connection
  // are turned away at once (a silent one used to hold the collector's loop five seconds).
  for (const char* how : {"--introduce", "--silent"}) {
    e2e::Result intruder =
        e2e::run(as_nobody({e2e::sample_path("hostile_client"), how}), {"MEMTRACE_SOCKET=" + control});
    EXPECT_EQ(intruder.status, 0) << intruder.err;
    EXPECT_EQ(intruder.out, "turned away\n") << how;
  }

  e2e::Result detach = e2e::run({e2e::kMemtrace, "detach", pid}, root_env);
  EXPECT_EQ(detach.status, 0) << detach.err;
  EXPECT_EQ(attach.wait(), 0) << read_file(attach.err);
  EXPECT_NE(read_file(attach.err).find("is not the one recorded; its connection was refused"), std::string::npos)
      << read_file(attach.err);
  std::string error;
  std::vector<std::string> traces = entries(dir + "/traces", "");
  ASSERT_EQ(traces.size(), 1u) << "the attached process's trace alone";
  EXPECT_NE(traces[0].find(pid), std::string::npos) << traces[0];
  // Root's folders went with the attach; the other user's stay as they were.
  for (const std::string& f : entries(tmp, "memtrace-")) EXPECT_EQ(stat_of(f).st_uid, kNobody) << f;
  std::ofstream(stop).put('\n');
  EXPECT_EQ(job.wait(), 0) << read_file(job.err);
}

// 2: an existing output folder is used only when it is the user's own and no one else may write
// in it: in a folder another user prepared, a link at a name memtrace writes would be followed.
TEST(AnotherUser, AnOutputFolderAnotherUserOwnsOrMayWriteInIsRefused) {
  NEEDS_TWO_USERS();
  const std::string dir = e2e::temp_dir("folders"), tmp = shared_folder("tmp");
  ASSERT_EQ(sh_as_nobody("mkdir -m 777 " + tmp + "/prepared").status, 0);
  auto run_into = [&](const std::string& folder, const std::vector<std::string>& options = {}) {
    std::vector<std::string> argv = {e2e::kMemtrace, "run", "--sim", "-o", folder};
    argv.insert(argv.end(), options.begin(), options.end());
    argv.insert(argv.end(), {"--", e2e::sample_path("train_loop"), "--steps", "1"});
    return e2e::run(argv);
  };
  e2e::Result prepared = run_into(tmp + "/prepared");
  EXPECT_NE(prepared.status, 0);
  EXPECT_NE(prepared.err.find("output folder " + tmp +
                              "/prepared belongs to another user (uid 65534), who could "
                              "change what memtrace writes there; choose a folder of your own"),
            std::string::npos)
      << prepared.err;
  EXPECT_TRUE(fs::is_empty(tmp + "/prepared"));

  fs::create_directory(tmp + "/open");
  ::chmod((tmp + "/open").c_str(), 0777);
  e2e::Result open = run_into(tmp + "/open");
  EXPECT_NE(open.status, 0);
  EXPECT_NE(open.err.find("may be written by anyone"), std::string::npos) << open.err;

  fs::create_directory(dir + "/team");  // a group others are in (a user's private group is the user's own)
  ASSERT_EQ(::chown((dir + "/team").c_str(), 0, kNobody), 0);
  ::chmod((dir + "/team").c_str(), 0770);
  e2e::Result team = run_into(dir + "/team");
  EXPECT_NE(team.status, 0);
  EXPECT_NE(team.err.find("may be written by its group"), std::string::npos) << team.err;
  EXPECT_NE(team.err.find("or share it with --umask 002"), std::string::npos) << team.err;
  EXPECT_EQ(run_into(dir + "/team", {"--umask", "002"}).status, 0) << "the group was asked to share it";

  // Group-writable, the group the user's private group (root's "root", as Debian makes one per
  // user, umask 002): the user's alone.
  if (const group* g = ::getgrgid(0); g && std::string(g->gr_name) == "root" && (!g->gr_mem || !g->gr_mem[0])) {
    fs::create_directory(dir + "/private-group");
    ASSERT_EQ(::chown((dir + "/private-group").c_str(), 0, 0), 0);
    ::chmod((dir + "/private-group").c_str(), 0775);
    EXPECT_EQ(run_into(dir + "/private-group").status, 0);
  }

  fs::create_directory(dir + "/mine");
  ::chmod((dir + "/mine").c_str(), 0700);
  EXPECT_EQ(run_into(dir + "/mine").status, 0);
}

// 2: PyTorch's history (the Python shim's torch_history.py, PyTorch 2.1 to 2.5) is written new,
// never through a link planted at its name, with the trace's mode.
TEST(AnotherUser, PyTorchsHistoryIsWrittenNewWithTheTracesMode) {
  const std::string dir = e2e::temp_dir("history");
  // The traces' mode, as memtrace run says it (none: 0600).
  for (const auto& [given, expected] : {std::pair<std::string, std::string>{"", "0o100600"}, {"640", "0o100640"}}) {
    const std::string out = dir + "/out" + given;
    fs::create_directory(out);
    ::chmod(out.c_str(), 0755);
    std::ofstream(dir + "/victim") << "untouched\n";
    const std::string script = R"(
import os, sys, types
sys.path.insert(0, sys.argv[1])
from _memtrace_shim import torch_history
memory = types.SimpleNamespace(_record_memory_history=lambda **kw: None,
                               _snapshot=lambda: {"segments": [], "device_traces": [[{"action": "alloc"}]]})
torch = types.SimpleNamespace(cuda=types.SimpleNamespace(memory=memory))
os.symlink(sys.argv[3], os.path.join(sys.argv[2], f"{os.getpid()}.torch-history-1.pickle"))
torch_history.History(torch, sys.argv[2], 10).collect("exit")
name = os.path.join(sys.argv[2], f"{os.getpid()}.torch-history-1.pickle")
print(oct(os.lstat(name).st_mode), os.path.islink(name), sorted(os.listdir(sys.argv[2])) == [os.path.basename(name)])
)";
    e2e::Result r =
        e2e::run({MEMTRACE_PYTHON, "-c", script, MEMTRACE_SOURCE_DIR "/injector/python", out, dir + "/victim"},
                 {given.empty() ? "MEMTRACE_FILE_MODE_UNSET=1" : "MEMTRACE_FILE_MODE=" + given});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, expected + " False True\n") << "a regular file of the trace's mode, nothing else left";
    EXPECT_EQ(read_file(dir + "/victim"), "untouched\n");
  }
}

// 3: a summary has its trace's mode: who cannot read the trace cannot read its summary, also
// when root summarizes another user's folder that links to a root-only trace.
TEST(AnotherUser, ASummaryHasItsTracesMode) {
  NEEDS_TWO_USERS();
  const std::string dir = e2e::temp_dir("summaries");
  for (const std::string umask : {"077", "022"}) {
    const std::string run = dir + "/" + umask;
    fs::create_directory(run);
    std::string traces = recorded_run(run, {"--umask", umask});
    e2e::Result s = e2e::run({e2e::kMemtrace, "summarize", traces});
    ASSERT_EQ(s.status, 0) << s.err;
    for (const std::string& trace : entries(traces, "")) {
      if (fs::path(trace).extension() != ".memtrace") continue;
      std::string summary = trace.substr(0, trace.size() - 9) + ".memsum";
      EXPECT_EQ(stat_of(summary).st_mode & 0777, stat_of(trace).st_mode & 0777) << summary;
      EXPECT_EQ(sh_as_nobody("cat " + summary + " >/dev/null").status == 0, umask == "022") << summary;
    }
  }
  // The other user's folder, with a link to a trace only root reads.
  const std::string theirs = shared_folder("theirs") + "/folder";
  ASSERT_EQ(sh_as_nobody("mkdir -m 755 " + theirs).status, 0);
  std::string root_trace;
  for (const std::string& t : entries(dir + "/077/traces", ""))
    if (fs::path(t).extension() == ".memtrace") root_trace = t;
  ASSERT_FALSE(root_trace.empty());
  ASSERT_EQ(sh_as_nobody("ln -s " + root_trace + " " + theirs + "/x.memtrace").status, 0);
  e2e::Result s = e2e::run({e2e::kMemtrace, "summarize", theirs});
  ASSERT_EQ(s.status, 0) << s.err;
  EXPECT_EQ(stat_of(theirs + "/x.memsum").st_mode & 0777, 0600u);
  EXPECT_NE(sh_as_nobody("cat " + theirs + "/x.memsum >/dev/null").status, 0) << "the other user read it";
}

// 6: a report file is written in place only when named as such (a path under /dev, a pipe of the
// user's own); a link planted at its path, to another user's FIFO, is replaced, not written through.
TEST(AnotherUser, AReportFileNeverWritesThroughALinkToAnotherUsersPipe) {
  NEEDS_TWO_USERS();
  const std::string dir = e2e::temp_dir("report-file"), tmp = shared_folder("tmp");
  e2e::Result job = e2e::run_sample(dir, "processes");  // several processes: the HTML page has a folder of pages
  ASSERT_EQ(job.status, 0) << job.err;
  const std::string traces = dir + "/traces";
  ASSERT_EQ(sh_as_nobody("mkfifo -m 666 " + tmp + "/fifo && ln -s " + tmp + "/fifo " + tmp + "/report.xml").status, 0);
  int reader = ::open((tmp + "/fifo").c_str(), O_RDONLY | O_NONBLOCK);  // the other user listening
  ASSERT_GE(reader, 0);
  e2e::Result check = e2e::run({e2e::kMemtrace, "check", traces, "--max-peak", "1TiB", "--junit", tmp + "/report.xml"});
  EXPECT_EQ(check.status, 0) << check.err;
  EXPECT_TRUE(S_ISREG(stat_of(tmp + "/report.xml").st_mode)) << "the link was replaced by the report";
  EXPECT_NE(read_file(tmp + "/report.xml").find("<testsuite"), std::string::npos);
  char byte;
  EXPECT_LE(::read(reader, &byte, 1), 0) << "the report went into the other user's pipe";

  // A report holds what its traces hold: never more open than they are (0600 in a 0700 folder).
  e2e::Result exported = e2e::run({e2e::kMemtrace, "export", "--format", "jsonl", "-o", tmp + "/events.jsonl", traces});
  EXPECT_EQ(exported.status, 0) << exported.err;
  EXPECT_EQ(stat_of(tmp + "/events.jsonl").st_mode & 0777, 0600u);
  EXPECT_NE(sh_as_nobody("cat " + tmp + "/events.jsonl >/dev/null").status, 0) << "the other user read the events";
  // The HTML page's folder of process pages, made first by the other user: not written into.
  ASSERT_EQ(sh_as_nobody("mkdir -m 777 " + tmp + "/page-processes").status, 0);
  e2e::Result page = e2e::run({e2e::kMemtrace, "html", "-o", tmp + "/page.html", traces});
  EXPECT_NE(page.err.find(tmp + "/page-processes belongs to another user (uid 65534)"), std::string::npos) << page.err;
  EXPECT_TRUE(fs::is_empty(tmp + "/page-processes"));

  // The other user's pipe named itself: refused.
  e2e::Result direct = e2e::run({e2e::kMemtrace, "check", traces, "--max-peak", "1TiB", "--junit", tmp + "/fifo"});
  EXPECT_EQ(direct.status, 2);
  EXPECT_NE(direct.err.find(tmp + "/fifo is another user's pipe or device: memtrace writes only into its user's own"),
            std::string::npos)
      << direct.err;
  EXPECT_LE(::read(reader, &byte, 1), 0);
  ::close(reader);
}

// 8: a set-user-ID program run by another user under memtrace run: its loader drops memtrace's
// preload, the simulated driver does not load CUDA_INJECTION64_PATH (secure_getenv), and the
// injector, loaded by the program itself, records nothing, loads nothing (CUPTI named by
// MEMTRACE_CUPTI_LIBRARY) and says so once.
TEST(AnotherUser, ASetUserIdProgramIsNotRecorded) {
  NEEDS_TWO_USERS();
  const std::string dir = e2e::temp_dir("setuid");
  fs::create_directory(dir + "/bin");
  const std::string program = dir + "/bin/setuid_program";
  fs::copy_file(e2e::sample_path("setuid_program"), program);
  ASSERT_EQ(::chown(program.c_str(), 0, 0), 0);
  ASSERT_EQ(::chmod(program.c_str(), 04755), 0);
  fs::create_directory(dir + "/user");
  ASSERT_EQ(::chown((dir + "/user").c_str(), kNobody, kNobody), 0);

  // An instrumented injector (scripts/sanitize) needs its sanitizer's runtime loaded first, which
  // a set-user-ID program's loader never preloads: there the program does not load it itself.
  const char* first = std::getenv("MEMTRACE_PRELOAD_FIRST");
  const bool instrumented = first && *first;
  if (instrumented)
    std::fprintf(stderr, "the injector is instrumented: the program does not load it, its own refusal is not tried\n");
  std::vector<std::string> command = {e2e::kMemtrace,       "run", "--sim", "--backend", "cupti", "-o",
                                      dir + "/user/traces", "--",  program};
  if (!instrumented) command.push_back(MEMTRACE_INJECTOR);
  e2e::Result r = e2e::run(as_nobody(command), {"MEMTRACE_CUPTI_LIBRARY=" MEMTRACE_SIM_DIR "/libcupti.so.13"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("setuid_program: done"), std::string::npos) << r.out << r.err;
  EXPECT_EQ(r.out.find("cupti"), std::string::npos) << r.out;
  const std::string notice = "memtrace: not recording this program: it runs set-user-ID or set-group-ID (AT_SECURE)";
  if (!instrumented) {
    ASSERT_NE(r.err.find(notice), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find(notice), r.err.rfind(notice)) << "said once: " << r.err;
  }
  EXPECT_NE(r.err.find("no CUDA allocations recorded"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir + "/user/traces"));
}

}  // namespace
