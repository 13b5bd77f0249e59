// `memtrace whatif`: a run's tensor requests replayed through the allocator model. Its judges are
// what really happened: every real PyTorch snapshot in tests/data/torch, replayed under its own
// settings from the state before its trace, must reach its own reserved peak (within 1%) with its
// own segments; a stand-in training recorded with the defaults must predict the same program run
// with expandable_segments:True (within 1%).
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include "harness.h"

namespace {

const std::string kStandIn = MEMTRACE_SIM_DIR "/torch/site-packages";
const std::string kScript = e2e::python_sample_path("torch_growing.py");

nlohmann::json whatif(const std::vector<std::string>& args) {
  std::vector<std::string> argv{e2e::kMemtrace, "whatif", "--json"};
  argv.insert(argv.end(), args.begin(), args.end());
  return e2e::command_json(argv);
}

// The prediction of a device for CONF under the run's own placement of what came before.
const nlohmann::json* prediction(const nlohmann::json& device, const std::string& conf) {
  for (const nlohmann::json& p : device["predictions"])
    if (p["alloc_conf"] == conf && p["placed_as_recorded"].get<bool>()) return &p;
  return nullptr;
}

class WhatIfSnapshot : public testing::TestWithParam<std::string> {};

TEST_P(WhatIfSnapshot, ReplaysToItsOwnPeakAndSegments) {
  const std::string path = std::string(MEMTRACE_TEST_DATA "/torch/") + GetParam();
  nlohmann::json doc = whatif({path});
  ASSERT_EQ(doc["processes"].size(), 1u) << doc.dump(1);
  const nlohmann::json& p = doc["processes"][0];
  for (const nlohmann::json& d : p["devices"]) {
    const std::string own = p["alloc_conf"].is_string() ? p["alloc_conf"].get<std::string>() : "";
    const nlohmann::json* q = prediction(d, own);
    ASSERT_TRUE(q) << d.dump(1);
    EXPECT_TRUE((*q)["as_recorded"].get<bool>());
    const double recorded = d["reserved_peak_bytes"].get<double>(), predicted = (*q)["predicted_reserved_peak_bytes"];
    EXPECT_GT(recorded, 0);
    EXPECT_NEAR(predicted, recorded, recorded * 0.01) << GetParam();
    EXPECT_EQ((*q)["segments_at_peak"], d["segments_at_peak"]) << GetParam();
    EXPECT_EQ((*q)["segments_at_end"], d["segments_at_end"]) << GetParam();
    EXPECT_TRUE((*q)["predicted_oom"].is_null());
    std::printf(
        "[ figures  ] %s: reserved peak %.0f, predicted %.0f; segments at the peak %s, predicted %s; at the "
        "end %s, predicted %s; %s allocations replayed\n",
        GetParam().c_str(), recorded, predicted, d["segments_at_peak"].dump().c_str(),
        (*q)["segments_at_peak"].dump().c_str(), d["segments_at_end"].dump().c_str(),
        (*q)["segments_at_end"].dump().c_str(), d["allocations"].dump().c_str());
  }
}

INSTANTIATE_TEST_SUITE_P(Real, WhatIfSnapshot,
                         testing::Values("upto2.0-oom.pickle", "2.1-finetune.pickle", "2.3-attention-backward.pickle",
                                         "2.3-compiled-annotations.pickle"),
                         [](const testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param.substr(0, info.param.find(".pickle"));
                           for (char& c : name)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return name;
                         });

e2e::Result growing(const std::string& dir, const std::vector<std::string>& env) {
  std::vector<std::string> all = env;
  all.push_back("PYTHONPATH=" + kStandIn);
  return e2e::run_traced(dir, {MEMTRACE_PYTHON, kScript}, {}, all);
}

class WhatIfTraining : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(e2e::temp_dir("whatif-training"));
    e2e::Result plain = growing(*dir_ + "/defaults", {});
    ASSERT_EQ(plain.status, 0) << plain.out << plain.err;
    e2e::Result expandable = growing(*dir_ + "/expandable", {"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"});
    ASSERT_EQ(expandable.status, 0) << expandable.out << expandable.err;
  }
  static std::string defaults() { return *dir_ + "/defaults/traces"; }
  static std::string expandable() { return *dir_ + "/expandable/traces"; }
  static std::string* dir_;
};
std::string* WhatIfTraining::dir_ = nullptr;

TEST_F(WhatIfTraining, TheDefaultsPredictExpandableSegmentsRun) {
  nlohmann::json predicted = whatif({"--alloc-conf", "expandable_segments:True", defaults()});
  nlohmann::json real = whatif({expandable()});
  const nlohmann::json& pd = predicted["processes"][0];
  EXPECT_EQ(pd["alloc_conf"], "");  // the run's own: unset, recorded as such
  EXPECT_TRUE(pd["release"].get<std::string>().starts_with("2.11")) << pd.dump(1);
  EXPECT_EQ(real["processes"][0]["alloc_conf"], "expandable_segments:True");
  const nlohmann::json& d = pd["devices"][0];
  const double run_peak = d["reserved_peak_bytes"], predicted_peak = d["predicted_reserved_peak_bytes"];
  const double real_peak = real["processes"][0]["devices"][0]["reserved_peak_bytes"];
  std::printf("[ figures  ] defaults: reserved peak %.0f; expandable segments predicted %.0f, run %.0f\n", run_peak,
              predicted_peak, real_peak);
  EXPECT_NEAR(predicted_peak, real_peak, real_peak * 0.01);
  EXPECT_LT(predicted_peak, run_peak * 0.5);               // the setting changes this program's peak: the test can tell
  EXPECT_EQ(d["predictions"][0]["segments_at_peak"], 1u);  // one expandable segment, grown
}

TEST_F(WhatIfTraining, TheCandidatesTableSortsByPeakAndNamesTheTraps) {
  e2e::Result r = e2e::run({e2e::kMemtrace, "whatif", defaults()});
  ASSERT_EQ(r.status, 0) << r.err;
  const size_t expandable = r.out.find("  expandable_segments:True "),
               own = r.out.find("(PyTorch's defaults) (as run)");
  ASSERT_NE(expandable, std::string::npos) << r.out;
  ASSERT_NE(own, std::string::npos) << r.out;
  EXPECT_LT(expandable, own) << r.out;  // its lower peak first
  for (const char* want : {"max_split_size_mb:512", "roundup_power2_divisions:4", "pytorch/pytorch#158029",
                           "vllm-project/vllm#42609", "pytorch/pytorch#193400", "PyTorch 2.11"})
    EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n" << r.out;
  nlohmann::json doc = whatif({defaults()});
  const nlohmann::json& d = doc["processes"][0]["devices"][0];
  EXPECT_EQ(d["predictions"].size(), 7u) << d.dump(
      1);  // the run's own, expandable segments, 3 max_split_size_mb, 2 roundup_power2_divisions
  EXPECT_EQ(d["predicted_reserved_peak_bytes"], d["reserved_peak_bytes"]);  // the first: the run's own settings
}

// frag's "Would expandable_segments help?", and the HTML page's, give the predicted figure.
TEST_F(WhatIfTraining, FragAndTheHtmlPageGiveThePrediction) {
  nlohmann::json predicted = whatif({"--alloc-conf", "expandable_segments:True", defaults()});
  e2e::Result frag = e2e::run({e2e::kMemtrace, "frag", defaults()});
  ASSERT_EQ(frag.status, 0) << frag.err;
  EXPECT_NE(frag.out.find("Would expandable_segments help? Likely"), std::string::npos) << frag.out;
  EXPECT_NE(frag.out.find("memtrace whatif predicts device 0 at 100 MiB reserved at its peak with it (358 MiB in "
                          "this run)"),
            std::string::npos)
      << frag.out;
  EXPECT_EQ(predicted["processes"][0]["devices"][0]["predicted_reserved_peak_bytes"], 100u << 20);
  // The run that had them says nothing more.
  e2e::Result on = e2e::run({e2e::kMemtrace, "frag", expandable()});
  EXPECT_EQ(on.out.find("memtrace whatif predicts"), std::string::npos) << on.out;
  const std::string page = e2e::temp_dir("whatif-html") + "/page.html";
  e2e::Result html = e2e::run({e2e::kMemtrace, "html", "-o", page, defaults()});
  ASSERT_EQ(html.status, 0) << html.err;
  std::ifstream in(page);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("memtrace whatif predicts device 0 at 100 MiB"), std::string::npos);
}

// Where it would run out: on a device of 380 MiB less the CUDA context and what else the run held
// outside PyTorch's allocator, the growing activations no longer fit.
TEST_F(WhatIfTraining, SaysWhereASmallerDeviceRunsOutOfMemory) {
  nlohmann::json doc = whatif({"--alloc-conf", "", "--capacity", "380MiB", defaults()});
  const nlohmann::json& d = doc["processes"][0]["devices"][0];
  ASSERT_TRUE(d["predicted_oom"].is_object()) << d.dump(1);
  EXPECT_EQ(d["predicted_oom"]["line"],
            "torch_growing.py:" + std::to_string(e2e::marked_line(kScript, "scores")) + " in main");
  EXPECT_GT(d["predicted_oom"]["requested_bytes"].get<uint64_t>(), 0u);
  EXPECT_LT(d["capacity_bytes"].get<uint64_t>(), uint64_t{380} << 20);
  nlohmann::json roomy = whatif({"--alloc-conf", "", defaults()});
  EXPECT_TRUE(roomy["processes"][0]["devices"][0]["predicted_oom"].is_null());
}

TEST_F(WhatIfTraining, RefusesWhatItCannotReplay) {
  // A setting PyTorch would refuse: the option named, as PyTorch's check says it.
  for (auto [conf, says] : {std::pair{"max_split_size_mb:10", "max_split_size_mb too small"},
                            {"no_such_option:1", "Unrecognized CachingAllocator option: no_such_option"},
                            {"expandable_segments:yes", "True/False argument for expandable_segments"},
                            {"roundup_power2_divisions:3", "divisons has to be power of 2"}}) {
    e2e::Result r = e2e::run({e2e::kMemtrace, "whatif", "--alloc-conf", conf, defaults()});
    EXPECT_EQ(r.status, 2) << conf;
    EXPECT_NE(r.err.find(says), std::string::npos) << conf << ": " << r.err;
  }
  e2e::Result size = e2e::run({e2e::kMemtrace, "whatif", "--capacity", "lots", defaults()});
  EXPECT_EQ(size.status, 2);
  EXPECT_NE(size.err.find("'lots' is not a size"), std::string::npos) << size.err;
  // A run with no allocated layer: one sentence.
  const std::string dir = e2e::temp_dir("whatif-plain");
  ASSERT_EQ(e2e::run_sample(dir, "leak").status, 0);
  e2e::Result plain = e2e::run({e2e::kMemtrace, "whatif", dir + "/traces"});
  EXPECT_EQ(plain.status, 2);
  EXPECT_NE(plain.err.find("no request to PyTorch's caching allocator"), std::string::npos) << plain.err;
  EXPECT_EQ(std::count(plain.err.begin(), plain.err.end(), '\n'), 1) << plain.err;
}

}  // namespace
