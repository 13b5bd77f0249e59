// Memory the allocation calls alone do not show: CUDA graphs' memory nodes and what graphs keep
// reserved, what stream-ordered pools keep after cudaFreeAsync, memory of other processes opened
// here (IPC handles, shareable handles) or multicast objects, and what other processes hold on the
// device. Each call is recorded with its own kind; none counts as the process's reserved memory;
// what the device holds for graphs, pools and other processes is told apart in the device layer.
#include <gtest/gtest.h>

#include <map>

#include "harness.h"

namespace {

using nlohmann::json;

constexpr uint64_t kMiB = 1 << 20;

// The sample, run with the device sampled after every allocation.
e2e::Result run_sampled(const std::string& dir, const std::string& sample, const std::vector<std::string>& env,
                        const std::vector<std::string>& memtrace_options = {}) {
  std::vector<std::string> command = {"/usr/bin/env", "MEMTRACE_SAMPLE_INTERVAL_US=0"};
  command.insert(command.end(), env.begin(), env.end());
  command.push_back(e2e::sample_path(sample));
  return e2e::run_traced(dir, command, memtrace_options);
}

std::map<std::string, std::string> kinds_by_api(const std::vector<json>& events) {
  std::map<std::string, std::string> kinds;
  for (const json& e : events)
    if (!e2e::is_device_sample(e)) kinds[e["api"]] = e["kind"];
  return kinds;
}

// The site peak --layer device lists for what lay outside the reserved layer of API's kind.
uint64_t device_layer_site(const std::string& dir, const std::string& api) {
  json peak = e2e::command_json({e2e::kMemtrace, "peak", "--layer", "device", "--json", dir + "/traces"});
  for (const json& s : peak["processes"][0]["devices"][0]["sites"])
    if (s["api"] == api) return s["bytes"].get<uint64_t>();
  ADD_FAILURE() << api << " is not among the sites: " << peak.dump(2);
  return 0;
}

// graph_memory: a graph allocating 8 MiB (runtime node) and 4 MiB (driver node, through an entry
// point) and freeing both, launched three times; then a 1 MiB cudaMalloc, the program's peak.
TEST(GraphMemory, NodesAreRecordedAndWhatGraphsKeepIsInTheDeviceLayer) {
  std::string dir = e2e::temp_dir("graph_memory");
  e2e::Result r = run_sampled(dir, "graph_memory", {});
  ASSERT_EQ(r.status, 0) << r.err;
  e2e::expect_report_matches_ledger(dir, r, true);  // the nodes hold none of the program's memory

  std::vector<json> events = e2e::exported_events(dir);
  std::map<std::string, std::string> kinds = kinds_by_api(events);
  EXPECT_EQ(kinds["cudaGraphAddMemAllocNode"], "graph_memory");
  EXPECT_EQ(kinds["cuGraphAddMemAllocNode"], "graph_memory");
  EXPECT_EQ(kinds["cuGraphAddMemFreeNode"], "graph_memory");
  for (const json& e : events) {
    if (e["api"] != "cudaGraphAddMemAllocNode" && e["api"] != "cuGraphAddMemAllocNode") continue;
    EXPECT_NE(e["handle"].get<uint64_t>(), 0u) << "the graph: " << e.dump();
    ASSERT_FALSE(e["stack"].empty()) << e.dump();
    EXPECT_NE(e["stack"][0]["file"].get<std::string>().find("graph_memory.cpp"), std::string::npos) << e.dump();
  }

  json d = e2e::report_json(dir + "/traces")["processes"][0]["devices"][0];
  EXPECT_EQ(d["peak_reserved_bytes"], kMiB);
  EXPECT_EQ(d["graph_reserved_at_peak_bytes"], 12 * kMiB) << d.dump(2);
  EXPECT_EQ(device_layer_site(dir, "device.graph_reserved"), 12 * kMiB);
  e2e::Result text = e2e::run({e2e::kMemtrace, "report", dir + "/traces"});
  EXPECT_NE(text.out.find("12.0 MiB by CUDA graphs"), std::string::npos) << text.out;
}

TEST(GraphMemory, EveryNodeIsRecordedOnceThroughCupti) {
  std::string dir = e2e::temp_dir("graph_memory_cupti");
  e2e::Result r = run_sampled(dir, "graph_memory", {}, {"--backend", "cupti"});
  ASSERT_EQ(r.status, 0) << r.err;
  e2e::expect_report_matches_ledger(dir, r, true);
  json p = e2e::report_json(dir + "/traces")["processes"][0];
  EXPECT_EQ(p["events_from_cupti"], p["events_total"]) << p.dump(2);
}

// A stream-ordered allocation captured into a graph is a node of it: graph memory, not the
// program's (graph_capture: 2, 3 and 4 MiB are captured; 1 and 5 MiB are not).
TEST(GraphMemory, CapturedAllocationsAreGraphMemory) {
  std::string dir = e2e::temp_dir("graph_capture_kinds");
  e2e::Result r = e2e::run_sample(dir, "graph_capture");
  ASSERT_EQ(r.status, 0) << r.err;
  e2e::expect_report_matches_ledger(dir, r, true);
  for (const json& e : e2e::exported_events(dir)) {
    if (e["op"] != "alloc" || e2e::is_device_sample(e)) continue;
    const bool captured = e.value("captured", false);
    EXPECT_EQ(e["kind"], captured ? "graph_memory" : "device") << e.dump();
  }
}

// What a stream-ordered pool keeps after cudaFreeAsync is device memory the calls no longer
// hold: it is told apart from the rest of what lies outside the reserved layer.
TEST(DeviceLayer, WhatAPoolKeepsIsToldApart) {
  std::string dir = e2e::temp_dir("device_layer_pools");
  e2e::Result r =
      e2e::run_traced(dir, {"/usr/bin/env", "MEMTRACE_SIM_POOL_HOLDS=1", "MEMTRACE_SIM_CONTEXT_BYTES=100MiB",
                            "MEMTRACE_SAMPLE_INTERVAL_US=0", e2e::sample_path("stream_pool"), "--iterations", "8"});
  ASSERT_EQ(r.status, 0) << r.err;
  json d = e2e::report_json(dir + "/traces")["processes"][0]["devices"][0];
  const uint64_t kept = d["pool_held_at_peak_bytes"];
  EXPECT_GT(kept, 0u) << d.dump(2);
  EXPECT_EQ(d["outside_reserved_at_peak_bytes"].get<uint64_t>(), 100 * kMiB + kept) << d.dump(2);
  e2e::Result text = e2e::run({e2e::kMemtrace, "report", dir + "/traces"});
  EXPECT_NE(text.out.find("kept by stream-ordered pools beyond their allocations"), std::string::npos) << text.out;
  EXPECT_EQ(device_layer_site(dir, "device.pool_held"), kept);
}

// sharing: the exporter's 4 MiB cudaMalloc opened by IPC handle in the importer; 1 MiB of its pool
// imported by pointer and freed; its 2 MiB of physical memory imported by file descriptor (through
// cuGetProcAddress), mapped and released; a 2 MiB multicast object. The importer holds none of
// the device's memory.
class Sharing : public ::testing::TestWithParam<std::string> {};

TEST_P(Sharing, ImportsAreRecordedWithTheirOwnKindsAndHoldNoMemory) {
  std::string dir = e2e::temp_dir("sharing_" + GetParam());
  e2e::Result r = e2e::run_sample(dir, "sharing", {}, {"--backend", GetParam()});
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  e2e::expect_report_matches_ledger(dir, r, true);

  std::map<std::string, std::string> kinds = kinds_by_api(e2e::exported_events(dir));
  EXPECT_EQ(kinds["cudaIpcOpenMemHandle"], "ipc_import");
  EXPECT_EQ(kinds["cudaIpcCloseMemHandle"], "ipc_import");
  EXPECT_EQ(kinds["cudaMemPoolImportPointer"], "ipc_import");
  EXPECT_EQ(kinds["cuMemImportFromShareableHandle"], "vmm_imported");
  EXPECT_EQ(kinds["cuMulticastCreate"], "multicast");

  json report = e2e::report_json(dir + "/traces");
  ASSERT_EQ(report["processes"].size(), 2u);
  for (const json& p : report["processes"]) {
    EXPECT_EQ(p["unmatched_frees"], 0) << p.dump(2);
    if (!p["events"].contains("cudaIpcOpenMemHandle")) continue;  // the exporter
    EXPECT_EQ(p["events"]["cudaIpcOpenMemHandle"]["bytes"], 4 * kMiB);
    EXPECT_EQ(p["events"]["cudaMemPoolImportPointer"]["bytes"], kMiB);
    EXPECT_EQ(p["events"]["cuMulticastCreate"]["bytes"], 2 * kMiB);
    // The imported handle's size is how much of it was mapped; it is released as it came.
    EXPECT_EQ(p["events"]["cuMemRelease"]["bytes"], 4 * kMiB) << p["events"].dump();
    for (const json& d : p["devices"]) EXPECT_EQ(d["peak_reserved_bytes"], 0) << d.dump();
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, Sharing, ::testing::Values("preload", "cupti"));

// Other processes on the device: cudaMemGetInfo counts them, NVML's per-process figure does not.
json device_with_others(const std::string& dir, const std::vector<std::string>& env) {
  std::vector<std::string> all = {"MEMTRACE_SIM_OTHER_PROCESSES_BYTES=1GiB", "MEMTRACE_SIM_CONTEXT_BYTES=100MiB"};
  all.insert(all.end(), env.begin(), env.end());
  e2e::Result r = run_sampled(dir, "graph_memory", all);
  EXPECT_EQ(r.status, 0) << r.err;
  return e2e::report_json(dir + "/traces")["processes"][0];
}

TEST(DeviceLayer, OtherProcessesAreToldApartByNvml) {
  std::string dir = e2e::temp_dir("device_layer_nvml");
  json p = device_with_others(dir, {});
  const json& d = p["devices"][0];
  EXPECT_EQ(d["other_processes_at_peak_bytes"], 1024 * kMiB) << d.dump(2);
  EXPECT_EQ(d["other_processes_known"], true);
  EXPECT_EQ(d["outside_reserved_at_peak_bytes"], 1024 * kMiB + 100 * kMiB + 12 * kMiB) << d.dump(2);
  EXPECT_TRUE(p["notices"].empty()) << p["notices"].dump();
  EXPECT_EQ(device_layer_site(dir, "device.other_processes"), 1024 * kMiB);
  EXPECT_EQ(device_layer_site(dir, "device.used"), 100 * kMiB);  // the context
  e2e::Result text = e2e::run({e2e::kMemtrace, "report", dir + "/traces"});
  EXPECT_NE(text.out.find("1.00 GiB by other processes (NVML), the rest: the CUDA context, library workspaces;"),
            std::string::npos)
      << text.out;
}

// NVML knows processes by their host pid: in a container of its own the process is not listed.
TEST(DeviceLayer, AProcessNvmlDoesNotListIsSaidOnce) {
  std::string dir = e2e::temp_dir("device_layer_nvml_pid");
  json p = device_with_others(dir, {"MEMTRACE_SIM_NVML_PID_OFFSET=100000"});
  const json& d = p["devices"][0];
  EXPECT_EQ(d["other_processes_known"], false);
  EXPECT_EQ(d["outside_reserved_at_peak_bytes"], 1024 * kMiB + 100 * kMiB + 12 * kMiB) << d.dump(2);
  ASSERT_EQ(p["notices"].size(), 1u) << p["notices"].dump();
  EXPECT_NE(p["notices"][0].get<std::string>().find("NVML does not list this process"), std::string::npos);
}

TEST(DeviceLayer, WithoutNvmlOtherProcessesStayInTheRest) {
  std::string dir = e2e::temp_dir("device_layer_no_nvml");
  json p = device_with_others(dir, {"MEMTRACE_NVML=0"});
  const json& d = p["devices"][0];
  EXPECT_EQ(d["other_processes_known"], false);
  EXPECT_EQ(d["other_processes_at_peak_bytes"], 0);
  EXPECT_TRUE(p["notices"].empty()) << p["notices"].dump();
  e2e::Result text = e2e::run({e2e::kMemtrace, "report", dir + "/traces"});
  EXPECT_NE(text.out.find("the rest: the CUDA context, library workspaces, other processes;"), std::string::npos)
      << text.out;
}

}  // namespace
