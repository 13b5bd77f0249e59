// memtrace's CUPTI layer on the simulated device, through the stand-in libcupti.so.13: each
// backend records every call once (the ledger's counts), CUPTI sees what no interposer can (a
// static runtime), and another CUPTI tool keeps working whether it subscribes before or after.
#include <gtest/gtest.h>

#include <map>

#include "harness.h"

namespace {

using nlohmann::json;

json only_process(const std::string& dir) {
  json report = e2e::report_json(dir + "/traces");
  EXPECT_EQ(report["processes"].size(), 1u);
  return report["processes"].empty() ? json::object() : report["processes"][0];
}

struct BackendCase {
  std::string sample;
  std::vector<std::string> args;
};
std::ostream& operator<<(std::ostream& os, const BackendCase& c) { return os << c.sample; }

class CuptiBackend : public ::testing::TestWithParam<BackendCase> {};

// With --backend cupti every call is recorded from CUPTI's callbacks, named after the call the
// program made (the runtime's, not the driver calls it makes inside), exactly as the ledger counts.
TEST_P(CuptiBackend, RecordsEveryCallOnceFromTheCallbacks) {
  const BackendCase& c = GetParam();
  std::string dir = e2e::temp_dir("cupti_" + c.sample);
  e2e::Result r = e2e::run_sample(dir, c.sample, c.args, {"--backend", "cupti"});
  ASSERT_EQ(r.status, 0) << r.err;
  e2e::expect_report_matches_ledger(dir, r, c.sample != "threads" && c.sample != "static_runtime");
  json p = only_process(dir);
  if (c.sample == "threads") {
    // Its threads start the session together: CUPTI is subscribed by the first while the others go
    // on, and their calls meanwhile are the interposers' (nothing lost, nothing twice: the ledger).
    // Once a thread's call is CUPTI's, every later call of that thread is too.
    EXPECT_GT(p["events_from_cupti"].get<int>(), 0);
    std::map<int64_t, int> cupti_calls_by_thread;
    for (const json& e : e2e::exported_events(dir)) {
      if (e["op"] == "mark" || e.value("before_recording", false)) continue;
      int64_t tid = e["tid"].get<int64_t>();
      if (e.value("from_cupti", false))
        ++cupti_calls_by_thread[tid];
      else
        EXPECT_EQ(cupti_calls_by_thread[tid], 0) << "an interposer recorded after CUPTI took over: " << e.dump();
    }
  } else {
    EXPECT_EQ(p["events_from_cupti"], p["events_total"]) << "an interposer recorded under --backend cupti";
  }
  EXPECT_EQ(p["unmatched_frees"], 0);
  EXPECT_TRUE(p["notices"].empty()) << p["notices"].dump();
}

INSTANTIATE_TEST_SUITE_P(Samples, CuptiBackend,
                         ::testing::Values(BackendCase{"runtime_kinds", {}}, BackendCase{"driver_api", {}},
                                           BackendCase{"vmm", {}}, BackendCase{"stream_pool", {}},
                                           BackendCase{"graph_capture", {}},
                                           BackendCase{"threads", {"--threads", "4", "--iterations", "2000"}},
                                           BackendCase{"static_runtime", {}}),
                         [](const auto& info) { return info.param.sample; });

// auto: the interposers record what they see, CUPTI the rest; nothing twice. The static runtime's
// calls reach no interposer but the driver entry points it hands out.
TEST(AutoBackend, TheStaticRuntimeIsSeenThroughCuptiAndNothingTwice) {
  std::string dir = e2e::temp_dir("auto_static");
  e2e::Result r =
      e2e::run_sample(dir, "static_runtime", {"--threads", "4", "--iterations", "300"}, {"--backend", "auto"});
  ASSERT_EQ(r.status, 0) << r.err;
  e2e::expect_report_matches_ledger(dir, r, false);
  json p = only_process(dir);
  // All but the two calls the program made through driver entry points it was handed (memtrace's).
  EXPECT_EQ(p["events_from_cupti"].get<int>(), p["events_total"].get<int>() - 2) << p.dump();
}

TEST(AutoBackend, ADynamicRuntimeIsRecordedByTheInterposers) {
  std::string dir = e2e::temp_dir("auto_dynamic");
  e2e::Result r = e2e::run_sample(dir, "runtime_kinds", {}, {"--backend", "auto"});
  ASSERT_EQ(r.status, 0) << r.err;
  e2e::expect_report_matches_ledger(dir, r, true);
  EXPECT_EQ(only_process(dir)["events_from_cupti"], 0);
}

// CUPTI takes one subscriber. A tool that subscribed first keeps it, and memtrace says so once and
// records through its interposers; a tool that subscribes later gets it from memtrace.
TEST(CuptiSubscribers, AToolThatSubscribedFirstKeepsCupti) {
  std::string dir = e2e::temp_dir("cupti_first");
  e2e::Result r = e2e::run_sample(dir, "cupti_tool", {"--subscribe-after", "0"}, {"--backend", "cupti"});
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("saw 10 cudaMalloc calls"), std::string::npos) << r.out;
  e2e::expect_report_matches_ledger(dir, r, true);
  json p = only_process(dir);
  EXPECT_EQ(p["events_from_cupti"], 0);
  ASSERT_EQ(p["notices"].size(), 1u) << p["notices"].dump();
  EXPECT_NE(p["notices"][0].get<std::string>().find("CUPTI is held by CUPTI for"), std::string::npos);
}

TEST(CuptiSubscribers, AToolThatSubscribesLaterIsHandedCupti) {
  std::string dir = e2e::temp_dir("cupti_later");
  e2e::Result r = e2e::run_sample(dir, "cupti_tool", {"--subscribe-after", "3"}, {"--backend", "cupti"});
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("saw 7 cudaMalloc calls"), std::string::npos) << r.out;
  e2e::expect_report_matches_ledger(dir, r, true);
  json p = only_process(dir);
  EXPECT_EQ(p["events_from_cupti"], 6) << "the three cudaMalloc and cudaFree pairs before the tool came";
  ASSERT_EQ(p["notices"].size(), 1u) << p["notices"].dump();
  EXPECT_NE(p["notices"][0].get<std::string>().find("let go of it"), std::string::npos);
}

TEST(CuptiSubscribers, WithoutMemtraceTheToolSeesEveryCall) {
  // The sample's own baseline: its count does not depend on memtrace.
  e2e::Result r = e2e::run({e2e::sample_path("cupti_tool")}, {"LD_LIBRARY_PATH=" MEMTRACE_SIM_DIR});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("saw 10 cudaMalloc calls"), std::string::npos) << r.out;
}

// A CUPTI that takes several subscribers (13.3: MEMTRACE_SIM_CUPTI_VERSION=130300, over a driver of
// CUDA 13.3): memtrace asks for it, and keeps CUPTI when a tool that asks for it too subscribes
// before or after it; a tool that does not ask (cuptiSubscribe) is handed CUPTI, as under CUPTI
// 13.0, where memtrace never asks and hands CUPTI to any tool that comes later. Over an older
// driver CUPTI 13.3 refuses the request: memtrace subscribes alone, as under 13.0 (and a tool that
// asks for several there is refused whether memtrace is there or not).
struct SharedCase {
  std::string name;
  std::string cupti_version;
  std::string driver_version;
  bool tool_asks_for_several;
  int subscribe_after;
  int tool_saw;
  int events_from_cupti;
  std::string notice;  // what the trace says, empty for nothing
};
std::ostream& operator<<(std::ostream& os, const SharedCase& c) { return os << c.name; }

class CuptiShared : public ::testing::TestWithParam<SharedCase> {};

TEST_P(CuptiShared, ToolsThatAskForSeveralSubscribersKeepCuptiBesideMemtrace) {
  const SharedCase& c = GetParam();
  std::string dir = e2e::temp_dir("cupti_shared_" + c.name);
  e2e::Result r = e2e::run_sample(
      dir, "cupti_tool",
      {"--subscribe-after", std::to_string(c.subscribe_after), "--several", c.tool_asks_for_several ? "1" : "0"},
      {"--backend", "cupti"},
      {"MEMTRACE_SIM_CUPTI_VERSION=" + c.cupti_version, "MEMTRACE_SIM_DRIVER_VERSION=" + c.driver_version});
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("saw " + std::to_string(c.tool_saw) + " cudaMalloc calls"), std::string::npos) << r.out;
  e2e::expect_report_matches_ledger(dir, r, true);
  json p = only_process(dir);
  EXPECT_EQ(p["events_from_cupti"], c.events_from_cupti);
  if (c.notice.empty()) {
    EXPECT_TRUE(p["notices"].empty()) << p["notices"].dump();
  } else {
    ASSERT_EQ(p["notices"].size(), 1u) << p["notices"].dump();
    EXPECT_NE(p["notices"][0].get<std::string>().find(c.notice), std::string::npos) << p["notices"].dump();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Versions, CuptiShared,
    ::testing::Values(SharedCase{"cupti13_3_tool_later", "130300", "13030", true, 3, 7, 20, ""},
                      SharedCase{"cupti13_3_tool_first", "130300", "13030", true, 0, 10, 20, ""},
                      SharedCase{"cupti13_3_v1_tool_later", "130300", "13030", false, 3, 7, 6, "let go of it"},
                      SharedCase{"cupti13_3_old_driver_tool_later", "130300", "13000", false, 3, 7, 6, "let go of it"},
                      SharedCase{"cupti13_0_tool_later", "130001", "13030", true, 3, 7, 6, "let go of it"},
                      SharedCase{"cupti13_0_tool_first", "130001", "13030", true, 0, 10, 0,
                                 "CUPTI is held by CUPTI for"}),
    [](const auto& info) { return info.param.name; });

// A CUPTI that takes no subscriber before the driver initialized: memtrace, whose session starts
// at the program's first call (before cuInit), subscribes when the driver loads it
// (InitializeInjection), and CUPTI records every call after that first one.
TEST(CuptiBeforeInit, MemtraceSubscribesWhenTheDriverLoadsIt) {
  std::string dir = e2e::temp_dir("cupti_refuses_before_init");
  e2e::Result r =
      e2e::run_sample(dir, "runtime_kinds", {}, {"--backend", "cupti"}, {"MEMTRACE_SIM_CUPTI_REFUSE_BEFORE_INIT=1"});
  ASSERT_EQ(r.status, 0) << r.err;
  e2e::expect_report_matches_ledger(dir, r, true);
  json p = only_process(dir);
  EXPECT_EQ(p["events_from_cupti"].get<int>(), p["events_total"].get<int>() - 1) << p.dump();
  EXPECT_TRUE(p["notices"].empty()) << p["notices"].dump();
}

// --verify: CUPTI's memory records beside the calls, compared at the end (memtrace verify).
struct Verified {
  e2e::Result run;
  e2e::Result verify;
  json result;  // the process's verify JSON
};

Verified run_verified(const std::string& name, const std::string& sample, const std::string& backend,
                      const std::vector<std::string>& env = {}) {
  std::string dir = e2e::temp_dir(name);
  std::vector<std::string> command = {"/usr/bin/env"};
  command.insert(command.end(), env.begin(), env.end());
  command.push_back(e2e::sample_path(sample));
  Verified v;
  v.run = e2e::run_traced(dir, command, {"--backend", backend, "--verify"});
  v.verify = e2e::run({MEMTRACE_BIN, "verify", "--json", dir + "/traces"});
  json j = json::parse(v.verify.out, nullptr, false);
  if (!j.is_discarded() && j["processes"].size() == 1) v.result = j["processes"][0];
  return v;
}

class VerifyBackend : public ::testing::TestWithParam<std::string> {};

TEST_P(VerifyBackend, EveryAllocationIsInBoth) {
  for (const char* sample : {"runtime_kinds", "stream_pool", "static_runtime"}) {
    SCOPED_TRACE(sample);
    Verified v = run_verified(std::string("verify_") + sample + "_" + GetParam(), sample, GetParam());
    ASSERT_EQ(v.run.status, 0) << v.run.err;
    EXPECT_NE(v.run.err.find("memtrace: verify:"), std::string::npos) << v.run.err;
    EXPECT_EQ(v.verify.status, 0) << v.verify.out << v.verify.err;
    EXPECT_EQ(v.result["agree"], true) << v.result.dump(2);
    EXPECT_GT(v.result["recorded"].get<int>(), 0);
    EXPECT_EQ(v.result["recorded"], v.result["seen_by_cupti"]);
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, VerifyBackend, ::testing::Values("auto", "preload", "cupti"));

TEST(Verify, AnAllocationHiddenFromTheCallbacksIsListed) {
  // No callback for the managed allocation, runtime or driver: under --backend cupti it is not
  // recorded, and CUPTI's activity records show it.
  Verified v = run_verified("verify_hidden_call", "runtime_kinds", "cupti",
                            {"MEMTRACE_SIM_SILENT_API=cudaMallocManaged,cuMemAllocManaged"});
  ASSERT_EQ(v.run.status, 0) << v.run.err;
  EXPECT_EQ(v.verify.status, 1) << v.verify.out;
  EXPECT_EQ(v.result["only_cupti_count"], 1) << v.result.dump(2);
  EXPECT_EQ(v.result["only_recorded_count"], 0);
  ASSERT_EQ(v.result["only_cupti"].size(), 1u);
  EXPECT_EQ(v.result["only_cupti"][0]["kind"], "managed");
  EXPECT_EQ(v.result["only_cupti"][0]["size"], 24 << 20);
  EXPECT_NE(v.run.err.find("seen by CUPTI and not recorded"), std::string::npos) << v.run.err;

  // auto: the interposer saw it.
  Verified both = run_verified("verify_hidden_call_auto", "runtime_kinds", "auto",
                               {"MEMTRACE_SIM_SILENT_API=cudaMallocManaged,cuMemAllocManaged"});
  EXPECT_EQ(both.verify.status, 0) << both.verify.out;
}

TEST(Verify, AnAllocationMissingFromCuptisRecordsIsListedWithItsSite) {
  Verified v =
      run_verified("verify_hidden_record", "runtime_kinds", "auto", {"MEMTRACE_SIM_NO_ACTIVITY_BYTES=10485760"});
  ASSERT_EQ(v.run.status, 0) << v.run.err;
  EXPECT_EQ(v.verify.status, 1) << v.verify.out;
  EXPECT_EQ(v.result["only_recorded_count"], 1) << v.result.dump(2);
  EXPECT_EQ(v.result["only_cupti_count"], 0);
  ASSERT_EQ(v.result["only_recorded"].size(), 1u);
  EXPECT_EQ(v.result["only_recorded"][0]["api"], "cudaMalloc");
  EXPECT_EQ(v.result["only_recorded"][0]["location"].get<std::string>().rfind("main at runtime_kinds.cpp:", 0), 0u)
      << v.result.dump(2);
}

TEST(Verify, ATraceWithoutCuptisRecordsHasNothingToCompare) {
  std::string dir = e2e::temp_dir("verify_none");
  ASSERT_EQ(e2e::run_sample(dir, "runtime_kinds").status, 0);
  e2e::Result v = e2e::run({MEMTRACE_BIN, "verify", dir + "/traces"});
  EXPECT_EQ(v.status, 2) << v.out;
  EXPECT_NE(v.out.find("no CUPTI memory records"), std::string::npos) << v.out;
}

TEST(Verify, RecordsStopWhereAnotherToolTakesCuptiOver) {
  std::string dir = e2e::temp_dir("verify_handover");
  e2e::Result r = e2e::run_sample(dir, "cupti_tool", {"--subscribe-after", "3"}, {"--backend", "cupti", "--verify"});
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("saw 7 cudaMalloc calls"), std::string::npos) << r.out;
  json p = only_process(dir);
  EXPECT_EQ(p["activity_records"], 6) << "three allocations and three releases before the tool came";
  bool said = false;
  for (const json& n : p["notices"])
    said = said || n.get<std::string>().find("stop where another tool") != std::string::npos;
  EXPECT_TRUE(said) << p["notices"].dump();
}

}  // namespace
