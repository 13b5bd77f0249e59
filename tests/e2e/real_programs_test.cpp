// Never harm a real program: what real CUDA, real PyTorch and real Python packages do that the
// plain samples do not. A vendored runtime loaded RTLD_LOCAL, two runtimes in one process, C++
// exceptions in Python, libraries loaded by relative path, stream-ordered memory on a device that
// is not current, CUDA graph capture, ctypes subclasses, fork while other threads are inside a
// call, a driver that cannot count its devices yet. Each program must behave exactly as it does
// without memtrace, and be recorded.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "harness.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kSimDir = MEMTRACE_SIM_DIR;
const std::string kVendoredDir = std::string(MEMTRACE_SAMPLES_DIR) + "/vendored";

// What a program printed, without the pid in its account line (which differs run to run).
std::string without_pids(const std::string& out) {
  return std::regex_replace(out, std::regex("\"pid\": ?[0-9]+"), "\"pid\":_");
}

// The program alone, on the simulated device, with EXTRA environment.
e2e::Result run_plain(const std::vector<std::string>& command, std::vector<std::string> extra = {}) {
  extra.push_back("LD_LIBRARY_PATH=" + kSimDir);
  return e2e::run(command, extra);
}

std::vector<json> events_of(const std::string& dir, const std::string& api) {
  std::vector<json> out;
  for (json& e : e2e::exported_events(dir))
    if (e["api"] == api) out.push_back(std::move(e));
  return out;
}

TEST(RealPrograms, VendoredRuntimeLoadedPrivatelyWorksAndIsRecorded) {
  // A host without CUDA of its own loads a plugin that ships a renamed runtime, RTLD_LOCAL.
  std::string dir = e2e::temp_dir("vendored");
  std::vector<std::string> command{e2e::sample_path("vendored_host"), kVendoredDir};
  e2e::Result plain = run_plain(command);
  e2e::Result traced = e2e::run_traced(dir, command);
  ASSERT_EQ(plain.status, 0) << plain.err;
  EXPECT_EQ(traced.status, plain.status) << traced.err;
  EXPECT_EQ(without_pids(traced.out), without_pids(plain.out));

  std::vector<json> mallocs = events_of(dir, "cudaMalloc");
  ASSERT_EQ(mallocs.size(), 9u);
  for (const json& e : mallocs) {
    EXPECT_EQ(e["result"], 0) << e;
    EXPECT_EQ(e["stack"][0]["function"], "plugin_malloc") << e["stack"][0];
  }
  EXPECT_EQ(events_of(dir, "cudaFree").size(), 9u);
}

TEST(RealPrograms, TwoRuntimesEachCallerReachesItsOwnCopy) {
  // The program's own runtime is global; the plugin's CUDA 12 copy is private. Current devices
  // and last errors are per copy, so a call sent to the wrong one changes what the program sees.
  std::string dir = e2e::temp_dir("two_runtimes");
  std::vector<std::string> command{e2e::sample_path("two_runtimes"), kVendoredDir};
  e2e::Result plain = run_plain(command, {"MEMTRACE_SIM_DEVICES=2"});
  e2e::Result traced = e2e::run_traced(dir, command, {"--sim-devices", "2"});
  ASSERT_EQ(plain.status, 0) << plain.err;
  ASSERT_NE(plain.out.find("plugin's buffer on device 1"), std::string::npos) << plain.out;
  EXPECT_EQ(traced.status, 0) << traced.err;
  EXPECT_EQ(without_pids(traced.out), without_pids(plain.out));

  // Recorded on the devices each runtime put them: 1, 2 (plugin, device 1) and 3 MiB, then the
  // plugin's failed call.
  std::vector<json> mallocs = events_of(dir, "cudaMalloc");
  ASSERT_EQ(mallocs.size(), 4u);
  EXPECT_EQ(mallocs[0]["device"], 0);
  EXPECT_EQ(mallocs[1]["device"], 1);
  EXPECT_EQ(mallocs[1]["stack"][0]["function"], "plugin_malloc");
  EXPECT_EQ(mallocs[2]["device"], 0);
  EXPECT_NE(mallocs[3]["result"], 0);

  // Each caller's driver functions at its own runtime's version: the plugin's CUDA 12.2
  // cuGraphAddNode (no edge data) and the program's 12.3 one both worked and were recorded, as was
  // the cuMemAlloc the plugin got from the cuGetProcAddress its runtime handed it.
  ASSERT_NE(plain.out.find("driver entry points: plugin's 0, program's 0"), std::string::npos) << plain.out;
  std::vector<json> nodes = events_of(dir, "cuGraphAddNode.mem_alloc");
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes[0]["size"], 1u << 20);
  EXPECT_EQ(nodes[0]["device"], 1);
  EXPECT_EQ(nodes[0]["stack"][0]["function"], "plugin_driver_entry_points");
  EXPECT_EQ(nodes[1]["size"], 2u << 20);
  EXPECT_EQ(events_of(dir, "cuGraphAddNode.mem_free").size(), 2u);
  // The plugin's runtime's own cudaGraphAddNode, CUDA 12.2's (five arguments), recorded.
  std::vector<json> runtime_nodes = events_of(dir, "cudaGraphAddNode.mem_alloc");
  ASSERT_EQ(runtime_nodes.size(), 1u);
  EXPECT_EQ(runtime_nodes[0]["size"], 512u << 10);
  EXPECT_EQ(runtime_nodes[0]["device"], 1);
  EXPECT_EQ(events_of(dir, "cudaGraphAddNode.mem_free").size(), 1u);
  std::vector<json> driver_allocs = events_of(dir, "cuMemAlloc");
  ASSERT_EQ(driver_allocs.size(), 1u);
  EXPECT_EQ(driver_allocs[0]["device"], 1);
  EXPECT_EQ(events_of(dir, "cuMemFree").size(), 1u);
}

TEST(RealPrograms, CxxExceptionsInPythonKeepTheToolchainsUnwinder) {
  // python3 loads no libgcc_s of its own: whatever memtrace brings must not take over
  // _Unwind_RaiseException and _Unwind_Resume from it (LD_DEBUG shows every binding).
  for (const e2e::Python& interpreter : e2e::pythons()) {
    const std::string& python = interpreter.path;
    SCOPED_TRACE(python);
    std::string dir = e2e::temp_dir("exceptions");
    fs::create_directories(dir + "/bindings");
    e2e::Result r = e2e::run({e2e::kMemtrace, "run", "--sim", "-o", dir + "/traces", "--", python,
                              e2e::python_sample_path("exceptions.py"), e2e::sample_path("libthrowing_plugin.so")},
                             {"LD_DEBUG=bindings", "LD_DEBUG_OUTPUT=" + dir + "/bindings/b"});
    ASSERT_EQ(r.status, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("caught 5 exceptions"), std::string::npos) << r.out;

    int toolchain = 0;
    for (const auto& file : fs::directory_iterator(dir + "/bindings")) {
      std::ifstream in(file.path());
      for (std::string line; std::getline(in, line);) {
        if (line.find("normal symbol `_Unwind_") == std::string::npos) continue;
        size_t to = line.find(" to ");
        std::string target = to == std::string::npos ? "" : line.substr(to);
        EXPECT_EQ(target.find("libunwind"), std::string::npos) << line;
        // libgcc_s, or in sanitizer runs the sanitizer's runtime, which intercepts it on purpose.
        bool ours =
            target.find("libgcc_s.so.1") != std::string::npos || target.find("/libasan.so") != std::string::npos;
        if (line.find("libstdc++.so.6") < to && line.find("`_Unwind_RaiseException'") != std::string::npos && ours)
          ++toolchain;
      }
    }
    EXPECT_GT(toolchain, 0) << "libstdc++ never bound _Unwind_RaiseException to libgcc_s: no exception was raised?";
    EXPECT_EQ(events_of(dir, "cudaMalloc").size(), 10u);
  }
}

TEST(RealPrograms, LibraryLoadedByRelativePathIsNotRescannedPerAllocation) {
  // dlopen("./libplugin_alloc.so") from the samples folder: the loader knows the library only by
  // its relative name. Its frames are still symbolized, and the modules are not scanned again
  // for every allocation (counted by a preloaded dl_iterate_phdr): twice the allocations, about as
  // many scans (the stack walk reads each module's unwind table once, and again after an unload).
  // The counter goes after what memtrace preloads. A sanitizer's runtime, preloaded first in
  // sanitizer runs (scripts/sanitize), calls dl_iterate_phdr before anything can forward it:
  // there the modules are not counted, only the frames checked.
  const char* sanitizer = std::getenv("MEMTRACE_PRELOAD_FIRST");
  const bool count = !sanitizer || !*sanitizer;
  std::map<int, long> scans;  // by repeat
  for (int repeat : {200, 400}) {
    std::string dir = e2e::temp_dir("relative-" + std::to_string(repeat));
    fs::create_directories(dir + "/scans");
    std::string preload = count ? "LD_PRELOAD=\"$LD_PRELOAD:" + e2e::sample_path("libscan_counter.so") + "\" " : "";
    std::string command = "cd " + std::string(MEMTRACE_SAMPLES_DIR) + " && " + preload + "exec ./plugins . --repeat " +
                          std::to_string(repeat);
    e2e::Result r = e2e::run({e2e::kMemtrace, "run", "--sim", "-o", dir + "/traces", "--", "/bin/sh", "-c", command},
                             {"SCAN_COUNT_DIR=" + dir + "/scans"});
    ASSERT_EQ(r.status, 0) << r.err;

    json report = e2e::report_json(dir + "/traces");
    ASSERT_EQ(report["processes"].size(), 1u);
    if (count) {
      std::string pid = std::to_string(report["processes"][0]["pid"].get<int>());
      std::ifstream in(dir + "/scans/" + pid);
      in >> scans[repeat];
      ASSERT_GE(scans[repeat], 1) << "no count from the traced process";
    }
    std::vector<json> mallocs = events_of(dir, "cudaMalloc");
    ASSERT_EQ(mallocs.size(), 2u * repeat + 1);
    EXPECT_NE(mallocs[0]["stack"][0]["function"].get<std::string>().find("plugin_internal_alloc"), std::string::npos)
        << mallocs[0]["stack"][0];
    EXPECT_TRUE(fs::path(mallocs[0]["stack"][0]["module"].get<std::string>()).is_absolute()) << mallocs[0]["stack"][0];
  }
  if (count) {
    EXPECT_LT(scans[400] - scans[200], 20) << "the injector scanned the modules " << scans[200] << " times for 400 "
                                           << "allocations, " << scans[400] << " times for 800";
  }
}

TEST(RealPrograms, StreamOrderedMemoryBelongsToItsStreamsDevice) {
  // multi_device ends with cudaMallocAsync and cudaMallocFromPoolAsync on the last device while
  // device 0 is current.
  std::string dir = e2e::temp_dir("async_device");
  ASSERT_EQ(e2e::run_sample(dir, "multi_device", {}, {"--sim-devices", "2"}).status, 0);
  for (const char* api : {"cudaMallocAsync", "cudaMallocFromPoolAsync"}) {
    std::vector<json> allocs = events_of(dir, api);
    ASSERT_EQ(allocs.size(), 1u) << api;
    EXPECT_EQ(allocs[0]["device"], 1) << api;
  }
  json devices = e2e::report_json(dir + "/traces")["processes"][0]["devices"];
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices[0]["peak_reserved_bytes"], 32u << 20);
  EXPECT_EQ(devices[1]["peak_reserved_bytes"], 160u << 20);
}

TEST(RealPrograms, DevicesCarryTheirUuidsSoRanksAreToldApart) {
  // Two ranks, each seeing its own GPU as device 0 (CUDA_VISIBLE_DEVICES), as torchrun sets up.
  std::string dir = e2e::temp_dir("uuids");
  std::string sample = e2e::sample_path("call_path");
  e2e::Result r = e2e::run_traced(
      dir, {"/bin/sh", "-c", "CUDA_VISIBLE_DEVICES=0 " + sample + " & CUDA_VISIBLE_DEVICES=1 " + sample + "; wait"},
      {"--sim-devices", "2"});
  ASSERT_EQ(r.status, 0) << r.err;
  json report = e2e::report_json(dir + "/traces");
  ASSERT_EQ(report["processes"].size(), 2u);
  std::set<std::string> uuids;
  for (const json& p : report["processes"]) {
    ASSERT_EQ(p["devices"].size(), 1u);
    EXPECT_EQ(p["devices"][0]["device"], 0);
    std::string uuid = p["devices"][0]["uuid"];
    EXPECT_TRUE(std::regex_match(uuid, std::regex("GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")))
        << uuid;
    uuids.insert(uuid);
  }
  EXPECT_EQ(uuids.size(), 2u) << "both ranks' device 0 got the same UUID";
}

TEST(RealPrograms, DevicesAreDescribedOnceTheDriverCanCountThem) {
  // The driver fails the first count (not ready); the devices are described after a later call.
  std::string dir = e2e::temp_dir("late_count");
  e2e::Result r = e2e::run({e2e::kMemtrace, "run", "--sim", "-o", dir + "/traces", "--", e2e::sample_path("call_path")},
                           {"MEMTRACE_SIM_DEVICE_COUNT_FAILURES=1"});
  ASSERT_EQ(r.status, 0) << r.err;
  json devices = e2e::report_json(dir + "/traces")["processes"][0]["devices"];
  ASSERT_EQ(devices.size(), 1u);
  EXPECT_EQ(devices[0]["name"], "memtrace simulated GPU 0");
}

TEST(RealPrograms, CaptureTimeCallsAreTagged) {
  // graph_capture: 1 and 5 MiB outside capture; 2, 3 (driver) and 4 MiB (per-thread stream) inside.
  std::string dir = e2e::temp_dir("capture");
  ASSERT_EQ(e2e::run_sample(dir, "graph_capture").status, 0);
  std::map<uint64_t, int> captured, total;
  for (const json& e : e2e::exported_events(dir)) {
    if (e2e::is_device_sample(e)) continue;
    uint64_t mib = e["size"].get<uint64_t>() >> 20;
    ++total[mib];
    if (e.value("captured", false)) ++captured[mib];
  }
  EXPECT_EQ(total, (std::map<uint64_t, int>{{1, 2}, {2, 2}, {3, 2}, {4, 2}, {5, 2}}));
  EXPECT_EQ(captured, (std::map<uint64_t, int>{{2, 2}, {3, 2}, {4, 2}}));
  json p = e2e::report_json(dir + "/traces")["processes"][0];
  EXPECT_EQ(p["captured_events"], 6);
}

TEST(RealPrograms, CtypesSubclassThatSkipsTheBaseInit) {
  std::string dir = e2e::temp_dir("subclass");
  std::vector<std::string> command = e2e::python_sample("ctypes_subclass.py");
  e2e::Result plain = run_plain(command);
  e2e::Result traced = e2e::run_traced(dir, command);
  ASSERT_EQ(plain.status, 0) << plain.err;
  EXPECT_EQ(traced.status, 0) << traced.err;
  EXPECT_EQ(without_pids(traced.out), without_pids(plain.out));
  EXPECT_EQ(events_of(dir, "cudaMalloc").size(), 1u);
}

class ForkTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ForkTest, ForkWhileOtherThreadsAreInsideCalls) {
  // Children forked while two threads walk stacks and register NVTX strings must not inherit a
  // lock held forever: each child allocates, registers a string and exits. A child of a process
  // CUPTI reports on has no CUDA of its own: its interposers record, and its exit never hangs.
  std::string dir = e2e::temp_dir("fork_" + GetParam());
  e2e::Result r = e2e::run_sample(dir, "fork_in_call", {"--forks", "60"}, {"--backend", GetParam()});
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("forks 60 hung 0 failed 0"), std::string::npos) << r.out << r.err;
  json report = e2e::report_json(dir + "/traces");
  EXPECT_EQ(report["processes"].size(), 61u);
  for (const json& p : report["processes"]) EXPECT_EQ(p["dropped_events"], 0);
}

INSTANTIATE_TEST_SUITE_P(Backends, ForkTest, ::testing::Values("auto", "cupti"));

TEST(RealPrograms, ForkWhileAThreadIsInsideTheLoader) {
  // glibc leaves its loader's lock held in a child forked while another thread was inside
  // dl_iterate_phdr (where memtrace's stack walks go for every new frame): memtrace holds fork
  // until no thread is inside, so each child walks the modules, loads a library and exits.
  // (Without memtrace this program hangs most of its children; with fork not held, 4 of 5 here.)
  std::string dir = e2e::temp_dir("fork_loader");
  e2e::Result r = e2e::run_sample(dir, "fork_in_loader", {"--forks", "20"});
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("forks 20 hung 0 failed 0"), std::string::npos) << r.out << r.err;
  json report = e2e::report_json(dir + "/traces");
  EXPECT_EQ(report["processes"].size(), 21u);
  for (const json& p : report["processes"]) EXPECT_EQ(p["dropped_events"], 0);
}

}  // namespace

namespace {

// A debuginfod server that accepts connections and never answers, as an unreachable one behind a
// firewall that drops packets: libdw, asked for a stripped library's debug information, waits
// for it until DEBUGINFOD_TIMEOUT, several times. What a collector symbolizing on the way would
// make every program wait for.
class SilentServer {
 public:
  SilentServer() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t size = sizeof addr;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), size) != 0 || ::listen(fd_, 128) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &size) != 0)
      return;
    port_ = ntohs(addr.sin_port);
  }
  ~SilentServer() {
    if (fd_ >= 0) ::close(fd_);
  }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

TEST(RealPrograms, EightProcessesStartingAtOnceNeverWaitForSymbolization) {
  // Eight ranks start at once, each allocating 20,000 times 30 frames deep through libc and
  // libstdc++, while symbolizing libstdc++ (stripped: its debug information is asked of a
  // debuginfod server that never answers) takes the collector seconds. Rings small enough to
  // fill long before that. Programs must not wait for the symbolizer: the longest wait each one
  // saw is in its trace, and stays far below the time the symbolizer was stuck.
  if (!fs::exists("/usr/lib/x86_64-linux-gnu/libdebuginfod.so.1"))
    GTEST_SKIP() << "libdebuginfod is not installed: nothing makes the symbolizer slow";
  SilentServer server;
  ASSERT_GT(server.port(), 0);
  std::string dir = e2e::temp_dir("eight");
  std::string burst = e2e::sample_path("startup_burst");
  std::string ranks = "for i in 1 2 3 4 5 6 7 8; do " + burst + " & done; wait";
  auto start = std::chrono::steady_clock::now();
  e2e::Result r = e2e::run(
      {e2e::kMemtrace, "run", "--sim", "-o", dir + "/traces", "--max-stall", "60s", "--", "/bin/sh", "-c", ranks},
      {"DEBUGINFOD_URLS=http://127.0.0.1:" + std::to_string(server.port()), "DEBUGINFOD_TIMEOUT=1",
       "DEBUGINFOD_CACHE_PATH=" + dir + "/debuginfod", "MEMTRACE_RING_BYTES=1048576",
       "MEMTRACE_SIM_LEDGER=" + dir + "/ledger-%p.txt"});
  double run_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(r.status, 0) << r.err;
  ASSERT_GE(run_s, 3.0) << "symbolizing did not stall (is debuginfod consulted?): the test shows nothing";

  json report = e2e::report_json(dir + "/traces");
  ASSERT_EQ(report["processes"].size(), 8u);
  auto ledgers = e2e::read_ledgers(dir);
  for (const json& p : report["processes"]) {
    SCOPED_TRACE("pid " + std::to_string(p["pid"].get<int>()));
    EXPECT_EQ(p["dropped_events"], 0);
    EXPECT_EQ(p["events"]["cudaMalloc"]["calls"], ledgers[p["pid"].get<int>()].apis["cudaMalloc"].calls);
    ASSERT_TRUE(p.contains("longest_wait_ns"));
    EXPECT_LT(p["longest_wait_ns"].get<double>() / 1e9, run_s / 4)
        << "a program waited for the collector while it symbolized";
  }
  std::smatch m;
  std::string out = r.out;
  int programs = 0;
  for (std::regex longest("longest call ([0-9]+) ns"); std::regex_search(out, m, longest); out = m.suffix()) {
    EXPECT_LT(std::stod(m[1]) / 1e9, run_s / 4) << "a call took as long as symbolizing";
    ++programs;
  }
  EXPECT_EQ(programs, 8);
}

}  // namespace

namespace {

TEST(RealPrograms, InjectorExportsOnlyWhatItInterposes) {
  // Preloaded first, whatever the injector exports comes before the program's own definitions:
  // a C++ template instantiated inside it must not stand in for the program's.
  e2e::Result nm = e2e::run({"/usr/bin/nm", "-D", "--defined-only", MEMTRACE_INJECTOR});
  ASSERT_EQ(nm.status, 0) << nm.err;
  std::istringstream lines(nm.out);
  int exported = 0;
  for (std::string line; std::getline(lines, line);) {
    std::string name = line.substr(line.rfind(' ') + 1);
    bool shim = name == "memtrace_python_ready" || name == "memtrace_torch_attach" || name == "memtrace_mark" ||
                name == "memtrace_range_push" || name == "memtrace_range_pop" || name == "memtrace_tag" ||
                name == "memtrace_torch_counter" || name == "memtrace_shim_claim" || name == "memtrace_notice" ||
                name == "memtrace_record_start" || name == "memtrace_record_stop" ||  // memtrace.record
                name == "memtrace_attach" || name == "memtrace_existing";             // memtrace attach
    bool expected = name.rfind("cu", 0) == 0 || name.rfind("nvtx", 0) == 0 ||
                    name.rfind("InitializeInjection", 0) == 0 || name == "dlsym" || name == "dlclose" ||
                    name == "dl_iterate_phdr" || shim;  // held across fork: loader_guard.cpp
    EXPECT_TRUE(expected) << "the injector exports " << name;
    ++exported;
  }
  EXPECT_GT(exported, 30);
}

}  // namespace
