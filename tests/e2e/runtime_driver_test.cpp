// The simulated runtime reaches its driver as NVIDIA's runtime reaches NVIDIA's driver: no driver
// function linked, and the same requests in the same order. NVIDIA's own runtime, installed with
// the toolkit (shared and static), runs over the simulated driver with its requests logged
// (MEMTRACE_SIM_DRIVER_REQUESTS): it stops where the driver lacks NVIDIA's private tables, and what
// it asked up to there is what ours asks, line for line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

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

}  // namespace
