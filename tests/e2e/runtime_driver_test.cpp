// How a runtime reaches its driver, and memtrace on that path. The simulated runtime reaches its
// driver as NVIDIA's runtime reaches NVIDIA's driver: no driver function linked, and the same
// requests in the same order. NVIDIA's own runtime, installed with the toolkit (shared and static),
// runs over the simulated driver with its requests logged (MEMTRACE_SIM_DRIVER_REQUESTS): it stops
// where the driver lacks NVIDIA's private tables, and what it asked up to there is what ours asks,
// line for line. Then what memtrace sees on that path: every call the runtime makes through the
// functions it was handed, whatever the program's first call, and every graph memory node.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "harness.h"

namespace {

namespace fs = std::filesystem;

std::vector<std::string> lines_of(const std::string& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// What PROGRAM asked of the simulated driver, with LIBRARY_PATH as its library path.
std::vector<std::string> driver_requests(const std::string& program, const std::string& library_path,
                                         const std::string& name) {
  const std::string log = e2e::temp_dir(name) + "/requests";
  e2e::run({program}, {"LD_LIBRARY_PATH=" + library_path, "MEMTRACE_SIM_DRIVER_REQUESTS=" + log});
  return lines_of(log);
}

std::string nvidia_runtime_dir() { return fs::path(MEMTRACE_CUDART_LIBRARY).parent_path(); }

// NVIDIA's requests are the first of ours; ours go on only with the private tables NVIDIA's stops
// at (the simulated driver has none of NVIDIA's), then the simulated device's own. What follows is
// the program's own (a lookup of its own through cudaGetDriverEntryPoint).
void expect_same_requests(const std::vector<std::string>& nvidia, const std::vector<std::string>& ours) {
  ASSERT_GE(nvidia.size(), 400u) << "NVIDIA's runtime made fewer lookups than the 440 observed";
  ASSERT_GE(ours.size(), nvidia.size());
  EXPECT_EQ(nvidia.front(), "lookup  0 0x0 missing") << "NVIDIA's probe first";
  for (size_t i = 0; i < nvidia.size(); ++i) ASSERT_EQ(ours[i], nvidia[i]) << "request " << i;
  EXPECT_NE(std::find(nvidia.begin(), nvidia.end(), "call cuInit"), nvidia.end());
  const auto own_table = std::find(ours.begin(), ours.end(), "export-table 6d656d74726163652d73696d2d686b31 found");
  ASSERT_NE(own_table, ours.end()) << "the simulated device's own table (\"memtrace-sim-hk1\") was never asked for";
  for (auto it = ours.begin() + static_cast<std::ptrdiff_t>(nvidia.size()); it != own_table; ++it)
    EXPECT_EQ(it->rfind("export-table ", 0), 0u) << *it;
}

TEST(SimulatedRuntime, AsksTheDriverWhatNvidiasSharedRuntimeAsks) {
  const std::string program = e2e::sample_path("leak");  // linked with libcudart.so.13
  const std::string sim = MEMTRACE_SIM_DIR;
  expect_same_requests(driver_requests(program, nvidia_runtime_dir() + ":" + sim, "nvidia"),
                       driver_requests(program, sim, "ours"));
}

TEST(SimulatedRuntime, AsksTheDriverWhatNvidiasStaticRuntimeAsks) {
  const std::string nvidia = e2e::sample_path("static_runtime_nvidia");  // libcudart_static.a
  if (!fs::exists(nvidia)) GTEST_SKIP() << "the toolkit has no libcudart_static.a";
  const std::string sim = MEMTRACE_SIM_DIR;
  expect_same_requests(driver_requests(nvidia, sim, "nvidia"),
                       driver_requests(e2e::sample_path("static_runtime"), sim, "ours"));
}

// No NEEDED libcuda.so.1, no undefined driver symbol, and -Bsymbolic: the shared runtime and its
// vendored CUDA 12 copy.
TEST(SimulatedRuntime, LinksNoDriverFunction) {
  for (const std::string& library : {std::string(MEMTRACE_SIM_DIR) + "/libcudart.so.13",
                                     std::string(MEMTRACE_SAMPLES_DIR) + "/vendored/libcudart-3f2a9c1e.so.12"}) {
    SCOPED_TRACE(library);
    e2e::Result dynamic = e2e::run({"/usr/bin/readelf", "-d", library});
    ASSERT_EQ(dynamic.status, 0) << dynamic.err;
    EXPECT_EQ(dynamic.out.find("libcuda.so"), std::string::npos) << dynamic.out;
    EXPECT_NE(dynamic.out.find("SYMBOLIC"), std::string::npos) << dynamic.out;
    e2e::Result undefined = e2e::run({"/usr/bin/nm", "-D", "--undefined-only", library});
    ASSERT_EQ(undefined.status, 0) << undefined.err;
    std::istringstream symbols(undefined.out);
    for (std::string kind, name; symbols >> kind >> name;)
      EXPECT_FALSE(name.size() > 2 && name.rfind("cu", 0) == 0 && std::isupper(static_cast<unsigned char>(name[2])))
          << name;
  }
}

// The report's calls and bytes per API of a run's only process.
std::map<std::string, std::pair<uint64_t, uint64_t>> api_table(const std::string& dir) {
  nlohmann::json report = e2e::report_json(dir + "/traces");
  EXPECT_EQ(report["processes"].size(), 1u);
  std::map<std::string, std::pair<uint64_t, uint64_t>> table;
  if (report["processes"].empty()) return table;
  for (const auto& [api, counts] : report["processes"][0]["events"].items())
    table[api] = {counts["calls"].get<uint64_t>(), counts["bytes"].get<uint64_t>()};
  return table;
}

constexpr uint64_t kMiB = 1 << 20;

// Graph memory made through the generic node API, by the runtime and by both of the driver's
// ABIs, is in the trace, under every backend: 9 MiB of allocation nodes, each freed by a free node.
class GenericNodes : public ::testing::TestWithParam<std::string> {};

TEST_P(GenericNodes, EveryMemoryNodeIsRecorded) {
  const std::string dir = e2e::temp_dir("graph_nodes_" + GetParam());
  e2e::Result r = e2e::run_sample(dir, "graph_nodes", {}, {"--backend", GetParam()});
  ASSERT_EQ(r.status, 0) << r.err;
  e2e::expect_report_matches_ledger(dir, r, true);
  const auto table = api_table(dir);
  using Row = std::pair<uint64_t, uint64_t>;
  EXPECT_EQ(table.at("cudaGraphAddNode.mem_alloc"), Row(1, 6 * kMiB));
  EXPECT_EQ(table.at("cudaGraphAddNode.mem_free"), Row(1, 6 * kMiB));
  EXPECT_EQ(table.at("cuGraphAddNode.mem_alloc"), Row(2, 3 * kMiB));
  EXPECT_EQ(table.at("cuGraphAddNode.mem_free"), Row(2, 3 * kMiB));
  uint64_t graph_bytes = 0;
  for (const nlohmann::json& e : e2e::exported_events(dir))
    if (e.value("kind", "") == "graph_memory" && e["op"] == "alloc") graph_bytes += e["size"].get<uint64_t>();
  EXPECT_EQ(graph_bytes, 9 * kMiB);
}

INSTANTIATE_TEST_SUITE_P(Backends, GenericNodes, ::testing::Values("preload", "cupti", "auto"));

// The same program whose first CUDA call is cudaGetDeviceCount, cudaMalloc, cuInit, or a call on
// another thread gives the same API table, and the runtime's driver table holds memtrace's
// interposers each time (a runtime that initialized inside a recorded call once held the driver's).
class FirstCall : public ::testing::TestWithParam<std::string> {};

TEST_P(FirstCall, TheTraceIsTheSame) {
  const std::string dir = e2e::temp_dir("first_" + GetParam());
  const std::string table_file = dir + "/runtime-driver-table";
  e2e::Result r = e2e::run_sample(dir, "graph_nodes", {"--first", GetParam()}, {"--backend", "preload"},
                                  {"MEMTRACE_SIM_RUNTIME_DRIVER_TABLE=" + table_file});
  ASSERT_EQ(r.status, 0) << r.err;
  e2e::expect_report_matches_ledger(dir, r, true);

  const std::string reference = e2e::temp_dir("first_device_count");
  ASSERT_EQ(e2e::run_sample(reference, "graph_nodes", {"--first", "device-count"}, {"--backend", "preload"}).status, 0);
  EXPECT_EQ(api_table(dir), api_table(reference));

  std::map<std::string, std::string> library_of;
  for (const std::string& line : lines_of(table_file)) {
    const size_t space = line.find(' ');
    library_of[line.substr(0, space)] = line.substr(space + 1);
  }
  for (const char* interposed :
       {"cuInit", "cuDeviceGetCount", "cuMemAlloc", "cuMemFree", "cuMemAllocAsync", "cuMemAllocAsync_ptsz",
        "cuMemHostAlloc", "cuGraphAddNode", "cuGraphAddMemAllocNode", "cuGetProcAddress"})
    EXPECT_EQ(library_of[interposed], "libmemtrace_inject.so") << interposed;
  for (const char* untouched : {"cuDeviceGetName", "cuCtxSetCurrent", "cuGetExportTable"})
    EXPECT_EQ(library_of[untouched], "libcuda.so.1") << untouched;
}

INSTANTIATE_TEST_SUITE_P(Orders, FirstCall, ::testing::Values("device-count", "malloc", "cu-init", "thread"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// A program that used CUDA without allocating is said to have, under every backend: a static
// runtime reaches cuInit and cuDeviceGetCount only through the functions the driver handed it.
class UsedCuda : public ::testing::TestWithParam<std::string> {};

TEST_P(UsedCuda, WithoutAllocating) {
  const std::string dir = e2e::temp_dir("ask_only_" + GetParam());
  e2e::Result r = e2e::run_sample(dir, "static_runtime", {"--ask-only", "1"}, {"--backend", GetParam()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err.find("never used CUDA"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(0 events): used CUDA, allocated no device memory"), std::string::npos) << r.err;
}

INSTANTIATE_TEST_SUITE_P(Backends, UsedCuda, ::testing::Values("preload", "cupti", "auto"));

// A driver whose cuGetProcAddress hands out entry points no exported symbol names
// (MEMTRACE_SIM_UNNAMED_PROC_ADDRESSES=1): memtrace hands out its interposers by the name looked up
// and the version asked, and the traces are the same: every graph node, every call of a static
// runtime, each caller's ABI at its own version (the plugin's CUDA 12.2 cuGraphAddNode).
TEST(UnnamedDriverFunctions, AreInterposedByNameAndVersion) {
  const std::vector<std::string> unnamed = {"MEMTRACE_SIM_UNNAMED_PROC_ADDRESSES=1"};
  const std::string named = e2e::temp_dir("named");
  ASSERT_EQ(e2e::run_sample(named, "graph_nodes", {"--first", "malloc"}, {"--backend", "preload"}).status, 0);
  const std::string dir = e2e::temp_dir("unnamed");
  std::vector<std::string> env = unnamed;
  env.push_back("MEMTRACE_SIM_RUNTIME_DRIVER_TABLE=" + dir + "/runtime-driver-table");
  e2e::Result r = e2e::run_sample(dir, "graph_nodes", {"--first", "malloc"}, {"--backend", "preload"}, env);
  ASSERT_EQ(r.status, 0) << r.err;
  e2e::expect_report_matches_ledger(dir, r, true);
  EXPECT_EQ(api_table(dir), api_table(named));
  for (const std::string& line : lines_of(dir + "/runtime-driver-table"))
    if (line.rfind("cuMemAlloc ", 0) == 0 || line.rfind("cuGraphAddNode ", 0) == 0) {
      EXPECT_EQ(line.substr(line.find(' ') + 1), "libmemtrace_inject.so") << line;
    }

  const std::string static_dir = e2e::temp_dir("unnamed_static");
  e2e::Result s = e2e::run_sample(static_dir, "static_runtime", {"--threads", "2", "--iterations", "50"},
                                  {"--backend", "preload"}, unnamed);
  ASSERT_EQ(s.status, 0) << s.err;
  EXPECT_EQ(api_table(static_dir).at("cuMemAlloc").first, 1u + 1 + 2 * 25);

  const std::string two = e2e::temp_dir("unnamed_two_runtimes");
  e2e::Result t =
      e2e::run_traced(two, {e2e::sample_path("two_runtimes"), std::string(MEMTRACE_SAMPLES_DIR) + "/vendored"},
                      {"--sim-devices", "2"}, unnamed);
  ASSERT_EQ(t.status, 0) << t.err;
  EXPECT_NE(t.out.find("driver entry points: plugin's 0, program's 0"), std::string::npos) << t.out;
  EXPECT_EQ(api_table(two).at("cuGraphAddNode.mem_alloc"), std::make_pair(uint64_t{2}, uint64_t{3} << 20));
}

}  // namespace
