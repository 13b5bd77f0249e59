// memtrace attach and memtrace detach: joining jobs that already run (a C++ job with threads inside
// CUDA calls and malloc, the stand-in PyTorch training with threads), recording, leaving them as
// they were; attaching twice; the job killed while attached; the refusals.
#include <gtest/gtest.h>
#include <signal.h>
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
using nlohmann::json;

namespace {

using e2e::Background;
using e2e::read_file;
using e2e::wait_for_text;

const std::string kStandIn = MEMTRACE_SIM_DIR "/torch/site-packages";

// A job's output with its pid taken out: what must be the same attached or not.
std::string without_pid(std::string text) { return std::regex_replace(text, std::regex("pid \\d+"), "pid P"); }

std::vector<std::string> long_running(const std::string& stop) {
  return {e2e::sample_path("long_running"), stop, "--threads", "3"};
}
// A job's environment: the simulated device, and under scripts/sanitize the sanitizer's runtime
// first, which the instrumented injector attach loads needs.
std::vector<std::string> job_env(std::vector<std::string> env = {}) {
  env.push_back("LD_LIBRARY_PATH=" MEMTRACE_SIM_DIR);
  return e2e::with_sanitizer_runtime(env);
}
const std::vector<std::string> kSimEnv = job_env();

// The job once without memtrace: stopped as soon as it is ready.
std::string unattached_output(const std::string& dir, const std::vector<std::string>& argv, const std::string& stop,
                              const std::vector<std::string>& env) {
  Background job(dir, "unattached", argv, env);
  EXPECT_TRUE(wait_for_text(job.out, "ready pid", job.pid));
  std::ofstream(stop).put('\n');
  EXPECT_EQ(job.wait(), 0) << job.errors();
  fs::remove(stop);
  return job.output();
}

json report_of(const std::string& folder) {
  json r = e2e::report_json(folder);
  EXPECT_EQ(r["processes"].size(), 1u) << r.dump();
  return r["processes"].empty() ? json::object() : r["processes"][0];
}

std::vector<json> events_of(const std::string& folder) {
  e2e::Result r = e2e::run({e2e::kMemtrace, "export", "--format", "jsonl", folder});
  EXPECT_EQ(r.status, 0) << r.err;
  std::vector<json> events;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) events.push_back(json::parse(line));
  return events;
}

uint64_t calls_of(const json& process, const std::string& api) {
  return process["events"].contains(api) ? process["events"][api]["calls"].get<uint64_t>() : 0;
}

TEST(Attach, ACppJobWithThreadsInsideCudaAndMallocRecordedTwiceAndLeftAsItWas) {
  std::string dir = e2e::temp_dir("attach-cpp");
  fs::create_directories(dir);
  const std::string stop = dir + "/stop";
  const std::string expected = without_pid(unattached_output(dir, long_running(stop), stop, kSimEnv));
  ASSERT_NE(expected.find("every check passed"), std::string::npos) << expected;

  Background job(dir, "job", long_running(stop), kSimEnv);
  ASSERT_TRUE(wait_for_text(job.out, "ready pid", job.pid)) << job.errors();
  const std::string pid = std::to_string(job.pid);
  // Three threads allocate and free device memory without pause and one mallocs: memtrace joins
  // while they are inside those calls, and stops a thread only where it holds no lock of libc's.
  e2e::Result first = e2e::run({e2e::kMemtrace, "attach", pid, "-o", dir + "/first", "--for", "0.5s"});
  EXPECT_EQ(first.status, 0) << first.err;
  EXPECT_NE(first.err.find("memtrace: attached to process " + pid + " (long_running)"), std::string::npos) << first.err;
  EXPECT_NE(first.err.find("memtrace: detached from process " + pid + "; it runs on"), std::string::npos) << first.err;
  e2e::Result second = e2e::run({e2e::kMemtrace, "attach", pid, "-o", dir + "/second", "--for", "0.3s"});
  EXPECT_EQ(second.status, 0) << second.err;
  std::ofstream(stop).put('\n');
  EXPECT_EQ(job.wait(), 0) << job.errors();
  EXPECT_EQ(without_pid(job.output()), expected) << job.errors();
  EXPECT_EQ(job.errors(), "");

  for (const std::string& folder : {dir + "/first", dir + "/second"}) {
    json p = report_of(folder);
    EXPECT_EQ(p["joined_by"], "memtrace attach");
    EXPECT_EQ(p["end_reason"], "memtrace detached; the process ran on");
    EXPECT_EQ(p["complete"], true);
    EXPECT_EQ(p["dropped_events"], 0);
    EXPECT_GT(calls_of(p, "cudaMalloc"), 100u) << p["events"].dump();
    EXPECT_EQ(p["events_from_cupti"], p["events_total"]) << "attached, CUPTI records every call";
    ASSERT_EQ(p["devices"].size(), 1u);
    const json& start = p["devices"][0]["at_recording_start"];
    // At the attach the device held the job's weights (4 x 8 MiB) and more, none known one by one.
    EXPECT_GT(start["device_used_bytes"].get<uint64_t>(), 32u << 20) << start.dump();
    EXPECT_EQ(start["known_count"], 0);
    std::string text = e2e::run({e2e::kMemtrace, "report", folder}).out;
    EXPECT_NE(text.find("process " + pid + " (memtrace attach)"), std::string::npos) << text;
    EXPECT_NE(text.find("at the attach ("), std::string::npos) << text;
    EXPECT_NE(text.find("allocated before memtrace attached or the CUDA context's"), std::string::npos) << text;
    EXPECT_EQ(text.find("died inside"), std::string::npos) << text;
  }
  // The threads' calls have their stacks.
  bool churn = false;
  for (const json& e : events_of(dir + "/first"))
    churn |= e["api"] == "cudaMalloc" && e["stack"].dump().find("cuda_churn") != std::string::npos;
  EXPECT_TRUE(churn);
}

// The thread memtrace stops for its calls was running the program's own code with values in its
// vector registers: they are as they were. A thread in epoll_wait (which a stop ends with EINTR)
// is never stopped.
TEST(Attach, LeavesTheStoppedThreadsRegistersAndOtherThreadsWaitsAsTheyWere) {
  std::string dir = e2e::temp_dir("attach-victim");
  fs::create_directories(dir);
  const std::string stop = dir + "/stop";
  for (const std::string mode : {"--spin", "--read"}) {
    Background victim(dir, "victim" + mode, {e2e::sample_path("attach_victim"), stop, mode}, kSimEnv);
    ASSERT_TRUE(wait_for_text(victim.out, "victim: ready", victim.pid)) << victim.errors();
    for (const std::string run : {"first", "second", "third"}) {
      e2e::Result r = e2e::run(
          {e2e::kMemtrace, "attach", std::to_string(victim.pid), "-o", dir + "/" + run + mode, "--for", "0.1s"});
      EXPECT_EQ(r.status, 0) << mode << ": " << r.err;
    }
    std::ofstream(stop).put('\n');
    EXPECT_EQ(victim.wait(), 0) << mode << ": " << victim.errors();
    EXPECT_EQ(victim.output(), "victim: ready\nvictim: intact\n") << mode << ": " << victim.errors();
    fs::remove(stop);
  }
}

TEST(Attach, KilledWhileAttachedLeavesACompleteTrace) {
  std::string dir = e2e::temp_dir("attach-killed");
  fs::create_directories(dir);
  Background job(dir, "job", long_running(dir + "/stop"), kSimEnv);
  ASSERT_TRUE(wait_for_text(job.out, "ready pid", job.pid)) << job.errors();
  Background attach(dir, "attach", {e2e::kMemtrace, "attach", std::to_string(job.pid), "-o", dir + "/traces"});
  ASSERT_TRUE(wait_for_text(attach.err, "to stop", attach.pid)) << attach.errors();
  // Killed once calls are recorded: the trace, read while it is written, holds some.
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
       std::chrono::steady_clock::now() < deadline;) {
    e2e::Result r = e2e::run({e2e::kMemtrace, "report", "--json", dir + "/traces"});
    if (r.status == 0 && r.out.find("\"cudaMalloc\"") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(job.pid, SIGKILL);
  EXPECT_EQ(job.wait(), 128 + SIGKILL);
  EXPECT_EQ(attach.wait(), 0) << attach.errors();
  EXPECT_NE(attach.errors().find("ended while attached"), std::string::npos) << attach.errors();
  json p = report_of(dir + "/traces");
  EXPECT_EQ(p["complete"], true);
  EXPECT_EQ(p["end_reason"], "ended while memtrace was attached (its exit status is not known)");
  EXPECT_GT(calls_of(p, "cudaMalloc"), 0u);
}

TEST(Attach, LeavesOnDetachAndOnCtrlC) {
  std::string dir = e2e::temp_dir("attach-detach");
  fs::create_directories(dir);
  const std::string stop = dir + "/stop";
  Background job(dir, "job", long_running(stop), kSimEnv);
  ASSERT_TRUE(wait_for_text(job.out, "ready pid", job.pid)) << job.errors();
  const std::string pid = std::to_string(job.pid);

  Background attach(dir, "attach", {e2e::kMemtrace, "attach", pid, "-o", dir + "/detached"});
  ASSERT_TRUE(wait_for_text(attach.err, "to stop", attach.pid)) << attach.errors();
  // One memtrace at a time: a second attach is refused, and leaves the first recording.
  e2e::Result again = e2e::run({e2e::kMemtrace, "attach", pid});
  EXPECT_EQ(again.status, 1);
  EXPECT_NE(again.err.find("memtrace is attached to it already (memtrace detach " + pid + " ends that)"),
            std::string::npos)
      << again.err;
  e2e::Result detach = e2e::run({e2e::kMemtrace, "detach", pid});
  EXPECT_EQ(detach.status, 0) << detach.err;
  EXPECT_NE(detach.err.find("detached from process " + pid + "; its trace is in " + dir + "/detached/"),
            std::string::npos)
      << detach.err;
  EXPECT_EQ(attach.wait(), 0) << attach.errors();
  EXPECT_EQ(report_of(dir + "/detached")["end_reason"], "memtrace detached; the process ran on");
  EXPECT_EQ(e2e::run({e2e::kMemtrace, "detach", pid}).status, 1) << "nothing is attached any more";

  Background interrupted(dir, "interrupted", {e2e::kMemtrace, "attach", pid, "-o", dir + "/interrupted"});
  ASSERT_TRUE(wait_for_text(interrupted.err, "to stop", interrupted.pid)) << interrupted.errors();
  ::kill(interrupted.pid, SIGINT);
  EXPECT_EQ(interrupted.wait(), 0) << interrupted.errors();
  EXPECT_NE(interrupted.errors().find("detached from process " + pid), std::string::npos) << interrupted.errors();

  std::ofstream(stop).put('\n');
  EXPECT_EQ(job.wait(), 0) << job.errors();
  EXPECT_NE(job.output().find("every check passed"), std::string::npos);
}

TEST(Attach, SaysWhyItCannotJoin) {
  auto refused = [](const std::vector<std::string>& argv, const std::string& why) {
    e2e::Result r = e2e::run(argv);
    EXPECT_EQ(r.status, 1) << r.err;
    EXPECT_NE(r.err.find(why), std::string::npos) << r.err;
  };
  refused({e2e::kMemtrace, "attach", "999999999"}, "cannot join process 999999999: there is no such process");
  std::string dir = e2e::temp_dir("attach-refused");
  fs::create_directories(dir);

  Background plain(dir, "plain", {"/bin/sleep", "600"});
  const std::string pid = std::to_string(plain.pid);
  refused({e2e::kMemtrace, "attach", pid}, "it is not using CUDA (no libcuda.so in its memory)");
  // Another user's process: no permission (as root, memtrace drops to nobody to ask).
  if (::geteuid() == 0 &&
      e2e::run({"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", e2e::kMemtrace, "--version"})
              .status == 0)
    refused({"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", e2e::kMemtrace, "attach", pid},
            "it belongs to another user; run memtrace attach as the process's user, or as root");
  ::kill(plain.pid, SIGKILL);
  plain.wait();

  Background fixed(dir, "static", {e2e::sample_path("static_sleeper")});
  ASSERT_TRUE(wait_for_text(fixed.out, "sleeping", fixed.pid));
  refused({e2e::kMemtrace, "attach", std::to_string(fixed.pid)},
          "it is statically linked: memtrace loads into a process through its dynamic loader");
  ::kill(fixed.pid, SIGKILL);
  fixed.wait();

  // Under memtrace run already.
  Background traced(
      dir, "traced",
      {e2e::kMemtrace, "run", "--sim", "-o", dir + "/run", "--", e2e::sample_path("long_running"), dir + "/stop"});
  ASSERT_TRUE(wait_for_text(traced.out, "ready pid", traced.pid)) << traced.errors();
  std::smatch m;
  std::string out = read_file(traced.out);
  ASSERT_TRUE(std::regex_search(out, m, std::regex("ready pid (\\d+)")));
  refused({e2e::kMemtrace, "attach", m[1]}, "it runs under memtrace run, which records all of it already");
  std::ofstream(dir + "/stop").put('\n');
  EXPECT_EQ(traced.wait(), 0) << traced.errors();

  e2e::Result bad = e2e::run({e2e::kMemtrace, "attach", "1", "--for", "soon"});
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.err.find("--for: 'soon' is not a duration"), std::string::npos) << bad.err;
}

// The stand-in PyTorch training with a loader thread: what PyTorch's allocator held at the attach
// is in the trace, marked so; what came after has its stacks; PyTorch's own figures are unchanged.
TEST(Attach, APyTorchTrainingWithThreads) {
  std::string dir = e2e::temp_dir("attach-torch");
  fs::create_directories(dir);
  const std::string stop = dir + "/stop";
  std::vector<std::string> train = e2e::python_sample("torch_train.py", {"--until", stop, "--threads", "2"});
  const std::vector<std::string> env = job_env({"PYTHONPATH=" + kStandIn});
  // PyTorch's account at the end, less what differs run to run (its pid, the step time).
  auto account = [](const std::string& output) {
    std::smatch m;
    if (!std::regex_search(output, m, std::regex("memtrace-sample: (.*)"))) return json();
    json a = json::parse(m[1].str());
    // The loader threads' tensors fall on the peak or not, run to run, attached or not.
    for (const char* varies : {"pid", "step_ms", "max_memory_allocated", "max_memory_requested"}) a.erase(varies);
    return a;
  };
  const json expected = account(unattached_output(dir, train, stop, env));
  ASSERT_FALSE(expected.is_null());

  Background job(dir, "job", train, env);
  ASSERT_TRUE(wait_for_text(job.out, "ready pid", job.pid)) << job.errors();
  const std::string pid = std::to_string(job.pid);
  e2e::Result attach = e2e::run({e2e::kMemtrace, "attach", pid, "-o", dir + "/traces", "--for", "0.5s"});
  EXPECT_EQ(attach.status, 0) << attach.err;
  e2e::Result snapshot = e2e::run({e2e::kMemtrace, "attach", pid, "-o", dir + "/snapshot", "--snapshot"});
  EXPECT_EQ(snapshot.status, 0) << snapshot.err;
  std::ofstream(stop).put('\n');
  EXPECT_EQ(job.wait(), 0) << job.errors();
  EXPECT_EQ(account(job.output()), expected) << job.output();
  // memtrace's hooks (backward, the optimizers' steps) were taken out when it left.
  EXPECT_NE(job.output().find("PyTorch's functions as they were: yes"), std::string::npos) << job.output();

  json p = report_of(dir + "/traces");
  EXPECT_EQ(p["joined_by"], "memtrace attach");
  const json& start = p["devices"][0]["at_recording_start"];
  // Every segment PyTorch held then is known: its reserved bytes, as memory_stats says them.
  EXPECT_EQ(start["known_bytes"], expected["memory_reserved"]) << start.dump();
  EXPECT_EQ(start["known_count"], expected["segments_allocated"]) << start.dump();
  EXPECT_GT(calls_of(p, "torch.alloc"), 50u) << "the tracker records the steps after the attach";
  EXPECT_GT(calls_of(p, "torch.free_completed"), 50u);
  EXPECT_GT(calls_of(p, "memtrace.mark"), 5u) << "the optimizer's steps";
  // Who held the device: the segments PyTorch held before the attach are PyTorch's, not the program's.
  json owners = e2e::command_json({e2e::kMemtrace, "peak", "--json", "--by", "owner", dir + "/traces"});
  bool tensors = false;
  for (const json& o : owners["processes"][0]["devices"][0]["owners"]) {
    EXPECT_NE(o["owner"], "the program") << o.dump();
    tensors |= o["owner"] == "PyTorch's tensors";
  }
  EXPECT_TRUE(tensors) << owners.dump(1);

  // The parameters and optimizer state PyTorch held are live before memtrace attached; what the
  // steps allocate is named by its line, the loader thread's too.
  std::string leaks = e2e::run({e2e::kMemtrace, "leaks", dir + "/traces"}).out;
  EXPECT_NE(leaks.find("live at the end of recording"), std::string::npos) << leaks;
  EXPECT_NE(leaks.find("live before memtrace attached"), std::string::npos) << leaks;
  std::string peak = e2e::run({e2e::kMemtrace, "snapshot", dir + "/snapshot"}).out;
  EXPECT_NE(peak.find("live before memtrace attached"), std::string::npos) << peak;
  EXPECT_NE(snapshot.out.find("live before memtrace attached"), std::string::npos) << snapshot.out;
  // `memtrace whatif` replays it: the release and settings recorded at the attach, and what PyTorch
  // held then taken where it lay, to the reserved peak the run reached.
  json whatif = e2e::command_json({e2e::kMemtrace, "whatif", "--json", "--alloc-conf", "", dir + "/traces"});
  ASSERT_EQ(whatif["processes"].size(), 1u) << whatif.dump(1);
  EXPECT_TRUE(whatif["processes"][0]["release"].get<std::string>().starts_with("2.11")) << whatif.dump(1);
  EXPECT_EQ(whatif["processes"][0]["alloc_conf"], "");
  const json& replayed = whatif["processes"][0]["devices"][0];
  EXPECT_EQ(replayed["predicted_reserved_peak_bytes"], replayed["reserved_peak_bytes"]) << replayed.dump(1);
  // Before the attach: PyTorch's own account, marked, without stacks; after: the steps' and the
  // loader thread's tensors, each with its Python stack.
  uint64_t before = 0, before_bytes = 0, steps = 0, loader = 0;
  for (const json& e : events_of(dir + "/traces")) {
    if (e["api"] != "torch.alloc") continue;
    std::string stack = e["stack"].dump();
    if (e.value("before_recording", false)) {
      ++before;
      before_bytes += e["size"].get<uint64_t>();
      EXPECT_NE(stack.find("live before memtrace attached"), std::string::npos) << stack;
    }
    steps += stack.find("\"main\"") != std::string::npos && stack.find("torch_train.py") != std::string::npos;
    loader += stack.find("loader") != std::string::npos;
  }
  // The two layers' weights and AdamW's two moments of each (16 MiB each), and whatever a step
  // held at that moment.
  EXPECT_GE(before, 6u);
  EXPECT_GE(before_bytes, 96u << 20);
  EXPECT_GT(steps, 10u);
  EXPECT_GT(loader, 10u);
}

}  // namespace
