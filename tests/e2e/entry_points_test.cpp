// Programs whose calls never pass through the global scope: a runtime linked statically (nvcc's
// default), which opens libcuda.so.1 itself and gets its driver functions from
// cuGetProcAddress_v2; a C program that looks up a private runtime's functions with dlsym. memtrace
// answers their dlsym lookups with its interposers; everything else dlsym answers stays as it was.
#include "entry_points.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

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

// The entry points of the installed headers that make, free, map, import or export memory: a
// verb of those (Malloc, Free, Create, Map, Import, Register...) on a noun of memory (Mem, Array,
// Pool, Graph, Host, External, Ipc, Multicast, Resource; Malloc and Free need none), not a query
// (Get) nor one of events, semaphores, contexts or callbacks.
std::set<std::string> memory_entry_points_of_headers() {
  static const std::regex driver(R"(\n(?:__CUDA_DEPRECATED )?CUresult CUDAAPI (cu\w+)\()");
  static const std::regex runtime(
      R"(\n\s*extern (?:__CUDA_DEPRECATED )?__host__ (?:__cudart_builtin__ )?cudaError_t CUDARTAPI (cuda\w+)\()");
  static const std::regex verb(
      "Unmap|Unregister|Unbind|Malloc|Alloc(?!ation)|Free|Create|Destroy|Release|Map|Import|Export|Open|Close|Register|"
      "Reserve|Trim|AddNode|Bind|Retain|^cu(da)?Graph(Exec)?NodeSetParams$|ChildGraphNodeSetParams|Instantiate|"
      "HandleForAddressRange|GetMemHandle");
  static const std::regex bare("Malloc|Alloc(?!ation)|Free");
  static const std::regex noun("Mem|Array|Pool|Multicast|Graph|Host|External|Ipc|Resource");
  static const std::regex excluded(
      "Event|Semaphore|Notification|Logs|Callback|ExportTable|Ctx|Get(?!HandleForAddressRange|Mapped|MemHandle)");
  std::set<std::string> names;
  for (const auto& [file, declaration] : {std::pair{"cuda.h", &driver}, std::pair{"cuda_runtime_api.h", &runtime}}) {
    std::ifstream in(std::string(MEMTRACE_CUDA_INCLUDE_DIR) + "/" + file);
    std::stringstream text;
    text << in.rdbuf();
    const std::string header = text.str();
    EXPECT_FALSE(header.empty()) << file;
    for (std::sregex_iterator it(header.begin(), header.end(), *declaration), end; it != end; ++it) {
      const std::string name = (*it)[1];
      if (std::regex_search(name, verb) && (std::regex_search(name, bare) || std::regex_search(name, noun)) &&
          !std::regex_search(name, excluded))
        names.insert(name);
    }
  }
  return names;
}

// Every such entry point is in memtrace's table (injector/entry_points.h), recorded or with the
// reason it is not; the table names no other.
TEST(EntryPoints, EveryMemoryEntryPointOfTheHeadersIsDecided) {
  const std::set<std::string> in_headers = memory_entry_points_of_headers();
  EXPECT_GE(in_headers.size(), 100u) << "the headers were not read";
  std::set<std::string> in_table;
  for (const auto& e : memtrace::inject::kMemoryEntryPoints) in_table.insert(std::string(e.name));
  for (const std::string& name : in_headers)
    EXPECT_TRUE(in_table.count(name)) << name << " makes, frees, maps, imports or exports memory: decide it in "
                                      << "injector/entry_points.h";
  for (const std::string& name : in_table) EXPECT_TRUE(in_headers.count(name)) << name << " is in no header";
}

std::set<std::string> exported_functions(const std::string& library) {
  e2e::Result r = e2e::run({"/usr/bin/nm", "-D", "--defined-only", library});
  EXPECT_EQ(r.status, 0) << r.err;
  std::set<std::string> names;
  std::istringstream lines(r.out);
  for (std::string address, kind, name; lines >> address >> kind >> name;)
    if (kind == "T") names.insert(name.substr(0, name.find('@')));  // without its version node
  return names;
}

// Whether EXPORTS hold NAME, or NAME's ABI of a CUDA version (cuMemAlloc_v2: _v and digits only).
bool exports(const std::set<std::string>& exports, const std::string& name) {
  if (exports.count(name)) return true;
  static const std::regex versioned("_v[0-9]+");
  for (auto it = exports.lower_bound(name + "_v"); it != exports.end() && it->rfind(name + "_v", 0) == 0; ++it)
    if (std::regex_match(it->substr(name.size()), versioned)) return true;
  return false;
}

// A recorded entry point has memtrace's interposer, is recorded as an API of its name, and the
// simulated runtime or driver implements it (so the tests can make the call).
TEST(EntryPoints, EachRecordedOneIsInterposedAndSimulated) {
  const auto injector = exported_functions(MEMTRACE_INJECTOR);
  const auto runtime = exported_functions(std::string(MEMTRACE_SIM_DIR) + "/libcudart.so.13");
  const auto driver = exported_functions(std::string(MEMTRACE_SIM_DIR) + "/libcuda.so.1");
  int recorded = 0;
  for (const auto& e : memtrace::inject::kMemoryEntryPoints) {
    if (e.recorded_as == memtrace::Api::kUnknown) continue;
    ++recorded;
    const std::string name(e.name);
    EXPECT_TRUE(exports(injector, name)) << name << ": no interposer";
    EXPECT_TRUE(exports(name.rfind("cuda", 0) == 0 ? runtime : driver, name)) << name << ": not simulated";
    const std::string_view api = memtrace::api_name(e.recorded_as);
    EXPECT_TRUE(api == name || api.substr(0, name.size() + 1) == name + ".") << name << " recorded as " << api;
  }
  EXPECT_GE(recorded, 40);
}

}  // namespace
