// Programs whose calls never pass through the global scope: a runtime linked statically (nvcc's
// default), which opens libcuda.so.1 itself and gets its driver functions from
// cuGetProcAddress_v2; a C program that looks up a private runtime's functions with dlsym. memtrace
// answers their dlsym lookups with its interposers; everything else dlsym answers stays as it was.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "harness.h"

namespace {

using nlohmann::json;

// What a static runtime's call is seen as: the driver call it makes.
std::string driver_call_of(const std::string& api) {
  static const std::map<std::string, std::string> kDriverCall = {
      {"cudaMalloc", "cuMemAlloc"},
      {"cudaFree", "cuMemFree"},
      {"cudaMallocAsync", "cuMemAllocAsync"},
      {"cudaFreeAsync", "cuMemFreeAsync"},
      {"cudaMallocManaged", "cuMemAllocManaged"},
      {"cudaMallocHost", "cuMemHostAlloc"},
      {"cudaHostAlloc", "cuMemHostAlloc"},
      {"cudaFreeHost", "cuMemFreeHost"},
      {"cudaMallocPitch", "cuMemAllocPitch"},
      {"cudaMallocFromPoolAsync", "cuMemAllocFromPoolAsync"}};
  auto it = kDriverCall.find(api);
  return it == kDriverCall.end() ? api : it->second;
}

TEST(StaticRuntime, TheSampleLinksNoCudaLibrary) {
  // Else the test below could pass through the global scope.
  e2e::Result r = e2e::run({"/usr/bin/readelf", "-d", e2e::sample_path("static_runtime")});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("libc.so.6"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("libcuda"), std::string::npos) << r.out;
}

TEST(StaticRuntime, EveryCallIsRecordedThroughItsDlsymLookups) {
  std::string dir = e2e::temp_dir("static_runtime");
  e2e::Result r =
      e2e::run_sample(dir, "static_runtime", {"--threads", "4", "--iterations", "300"}, {"--backend", "preload"});
  ASSERT_EQ(r.status, 0) << r.err;
  e2e::expect_report_matches_ledger(dir, r, false, driver_call_of);
  json report = e2e::report_json(dir + "/traces");
  const json& p = report["processes"][0];
  EXPECT_EQ(p["unmatched_frees"], 0);
  EXPECT_GE(p["events"]["cuMemAlloc"]["calls"].get<int>(), 1 + 1 + 4 * 150) << p["events"].dump();

  // The runtime's own frames lie in the program: the sites are the program's calls.
  const json& sites = p["devices"][0]["top_sites_at_peak"];
  ASSERT_FALSE(sites.empty());
  for (const json& s : sites)
    EXPECT_NE(s["location"].get<std::string>().find("static_runtime.cpp:"), std::string::npos) << s.dump();
}

TEST(PrivateRuntime, DlsymFromCIsRecorded) {
  std::string dir = e2e::temp_dir("private_runtime");
  e2e::Result r =
      e2e::run_traced(dir, {e2e::sample_path("private_runtime"), "libcudart.so.13"}, {"--backend", "preload"});
  ASSERT_EQ(r.status, 0) << r.err;
  e2e::expect_report_matches_ledger(dir, r, true);
}

// With another runtime in the global scope, the private copy still serves every call (its own
// current device), and memtrace asks that copy which device each allocation is on.
TEST(PrivateRuntime, TheCopyLookedUpServesItsCallsWhenAnotherIsGlobal) {
  std::string dir = e2e::temp_dir("private_vendored");
  std::string vendored = std::string(MEMTRACE_SAMPLES_DIR) + "/vendored/libcudart-3f2a9c1e.so.12";
  e2e::Result r = e2e::run_traced(dir, {e2e::sample_path("private_runtime"), vendored, "--device", "1", "--global"},
                                  {"--sim-devices", "2", "--backend", "preload"});
  ASSERT_EQ(r.status, 0) << r.err;
  auto ledgers = e2e::read_ledgers(dir);
  ASSERT_EQ(ledgers.size(), 1u);
  EXPECT_EQ(ledgers.begin()->second.live[1], 7u << 20) << "the program's calls went to another copy";
  e2e::expect_report_matches_ledger(dir, r, true);
}

json probe(const e2e::Result& r) {
  size_t open = r.out.find('{');
  EXPECT_NE(open, std::string::npos) << r.out << r.err;
  return open == std::string::npos ? json::object() : json::parse(r.out.substr(open, r.out.find('\n', open) - open));
}

TEST(Dlsym, OnlyCudaEntryPointsInCudaHandlesChange) {
  e2e::Result plain = e2e::run({e2e::sample_path("dlsym_probe")}, {"LD_LIBRARY_PATH=" MEMTRACE_SIM_DIR});
  ASSERT_EQ(plain.status, 0) << plain.err;
  json before = probe(plain);
  std::string dir = e2e::temp_dir("dlsym_probe");
  e2e::Result traced = e2e::run_traced(dir, {e2e::sample_path("dlsym_probe")}, {"--backend", "preload"});
  ASSERT_EQ(traced.status, 0) << traced.err;
  json after = probe(traced);

  const std::string injector = std::filesystem::path(MEMTRACE_INJECTOR).filename();
  // Lookups of allocation entry points in libcuda's handle: memtrace's interposers, no error left.
  for (const char* key : {"handle_allocation", "handle_proc_address", "after_missing"}) {
    EXPECT_EQ(before[key]["module"], "libcuda.so.1") << key;
    EXPECT_EQ(after[key]["module"], injector) << key;
    EXPECT_EQ(after[key]["error"], false) << key;
  }
  // Everything else as without memtrace: functions it does not interpose, the driver's private
  // tables, a missing name (and its error).
  for (const char* key : {"handle_other", "handle_export_table", "handle_missing"})
    EXPECT_EQ(after[key], before[key]) << key;
  EXPECT_EQ(after["handle_other"]["module"], "libcuda.so.1");
  EXPECT_EQ(after["handle_missing"]["error"], true);
  // RTLD_NEXT is answered relative to the program, not to memtrace's dlsym: the next object after
  // the program is the preloaded injector.
  EXPECT_EQ(after["next_after_main"]["module"], injector);
  EXPECT_EQ(after["default_scope"]["module"], injector);
}

}  // namespace
