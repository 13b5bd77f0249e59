// memtrace estimate and explain from the command line.
#include <gtest/gtest.h>

#include <fstream>

#include "harness.h"

namespace {

using nlohmann::json;

TEST(EstimateCommand, JsonHasEveryComponentByName) {
  e2e::Result r = e2e::run({e2e::kMemtrace, "estimate", "--model", "llama-2-7b", "--params", "7e9", "--mode", "infer",
                            "--context", "4096", "--batch", "32", "--gpu", "H200", "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  json e = json::parse(r.out);
  EXPECT_EQ(e["components"]["kv_cache"], 64ull << 30);
  EXPECT_EQ(e["components"]["weights"], 14000000000ull);
  uint64_t sum = 0;
  for (const char* part : {"weights", "kv_cache", "activations", "cuda_context", "workspace"})
    sum += e["components"][part].get<uint64_t>();
  EXPECT_EQ(e["components"]["total"], sum);
  EXPECT_EQ(e["total"], sum);
  EXPECT_TRUE(e["formulas"].contains("kv_cache"));
  EXPECT_EQ(e["gpu"]["name"], "H200");
  EXPECT_EQ(e["fits"], true);

  e2e::Result train = e2e::run({e2e::kMemtrace, "estimate", "--model", "llama-2-7b", "--optimizer", "adam", "--json"});
  ASSERT_EQ(train.status, 0) << train.err;
  json t = json::parse(train.out);
  for (const char* part : {"weights", "gradients", "master_weights", "optimizer_state", "model_states", "activations"})
    EXPECT_TRUE(t["components"].contains(part)) << part;
}

TEST(EstimateCommand, TextVerdictAndFixes) {
  e2e::Result r =
      e2e::run({e2e::kMemtrace, "estimate", "--model", "llama-2-7b", "--optimizer", "adam", "--gpu", "A100-80GB"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("does not fit on A100-80GB"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("would fit with"), std::string::npos) << r.out;
}

TEST(EstimateCommand, FromAConfigFile) {
  std::string dir = e2e::temp_dir("config");
  std::ofstream(dir + "/config.json") << R"({"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12,
                                            "vocab_size": 50257, "n_positions": 1024})";
  e2e::Result r = e2e::run({e2e::kMemtrace, "estimate", "--config", dir + "/config.json", "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["model"]["parameters"], 124439808.0);
}

TEST(EstimateCommand, BadUseSaysWhy) {
  auto fails = [](const std::vector<std::string>& args, const std::string& message) {
    std::vector<std::string> argv{e2e::kMemtrace, "estimate"};
    argv.insert(argv.end(), args.begin(), args.end());
    e2e::Result r = e2e::run(argv);
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
  };
  fails({}, "give one of --model");
  fails({"--model", "llama-9"}, "unknown model");
  fails({"--config", "/nonexistent.json"}, "cannot read");
  fails({"--model", "gpt2", "--params", "lots"}, "is not a count");
  fails({"--model", "gpt2", "--gpu", "GTX-280"}, "unknown GPU");
  fails({"--model", "gpt2", "--tp", "2"}, "multiple of");
}

TEST(ExplainCommand, MeasuredBesideTheEstimate) {
  std::string dir = e2e::temp_dir("explain");
  ASSERT_EQ(e2e::run_sample(dir, "train_loop", {"--steps", "3"}).status, 0);
  e2e::Result r = e2e::run({e2e::kMemtrace, "explain", dir + "/traces", "--model", "gpt2", "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  json x = json::parse(r.out);
  json report = e2e::report_json(dir + "/traces");
  uint64_t peak = report["processes"][0]["devices"][0]["peak_reserved_bytes"];
  ASSERT_EQ(x["measured"].size(), 1u);
  EXPECT_EQ(x["measured"][0]["layers"]["reserved"], peak);
  EXPECT_EQ(x["measured"][0]["difference_bytes"].get<int64_t>(),
            static_cast<int64_t>(peak) - x["expected_reserved_bytes"].get<int64_t>());
  EXPECT_FALSE(x["measured"][0]["reading"].get<std::string>().empty());
  EXPECT_EQ(x["categories_known"], false);

  e2e::Result text = e2e::run({e2e::kMemtrace, "explain", dir + "/traces", "--model", "gpt2"});
  EXPECT_NE(text.out.find("peak reserved"), std::string::npos) << text.out;
}

}  // namespace
