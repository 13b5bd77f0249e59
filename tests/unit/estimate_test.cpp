// The estimator against the standard worked figures (Llama-2-7B at a nominal P = 7×10⁹).
#include "memtrace/estimate/estimate.h"

#include <gtest/gtest.h>

namespace {

using namespace memtrace;

constexpr double MiB = 1 << 20, GiB = 1 << 30;

Estimate run(const EstimateOptions& options, const std::string& model = "llama-2-7b") {
  Estimate e;
  std::string error;
  EXPECT_TRUE(estimate(*model_preset(model), options, e, error)) << error;
  return e;
}

EstimateOptions llama7b(const std::string& mode) {
  EstimateOptions o;
  o.mode = mode;
  o.params = 7e9;
  o.precision = "bf16";
  return o;
}

TEST(Estimate, KvCacheOfLlama2_7B) {
  EstimateOptions o = llama7b("infer");
  o.context = 1;
  EXPECT_DOUBLE_EQ(run(o).component("kv_cache"), 0.5 * MiB);  // per token
  o.context = 4096;
  EXPECT_DOUBLE_EQ(run(o).component("kv_cache"), 2 * GiB);  // one 4K-token sequence
  o.batch = 32;
  EXPECT_DOUBLE_EQ(run(o).component("kv_cache"), 64 * GiB);  // 32 of them
}

TEST(Estimate, GroupedQueryAttentionCacheOfLlama3_70B) {
  EstimateOptions o;
  o.mode = "infer";
  ModelShape gqa = *model_preset("llama-3-70b"), mha = gqa;
  mha.kv_heads = mha.heads;
  Estimate a, b;
  std::string error;
  ASSERT_TRUE(estimate(gqa, o, a, error));
  ASSERT_TRUE(estimate(mha, o, b, error));
  EXPECT_EQ(gqa.kv_heads, 8);
  EXPECT_DOUBLE_EQ(a.component("kv_cache") * 8, b.component("kv_cache"));
}

TEST(Estimate, PagedKvBlocksRoundUp) {
  EstimateOptions o = llama7b("infer");
  o.context = 4100;
  o.kv_block = 16;
  EXPECT_DOUBLE_EQ(run(o).component("kv_block_waste"), 12 * 0.5 * MiB);  // 4100 -> 4112 tokens
}

TEST(Estimate, MegatronActivationsOfLlama2_7B) {
  EstimateOptions o = llama7b("train");
  o.batch = 1;
  o.seq = 2048;
  Estimate e = run(o);
  EXPECT_DOUBLE_EQ(e.per_layer_linear, 272 * MiB);
  EXPECT_DOUBLE_EQ(e.per_layer_quadratic, 640 * MiB);
  EXPECT_DOUBLE_EQ(e.component("activations"), 28.5 * GiB);  // 8.5 + 20

  o.checkpointing = true;
  EXPECT_DOUBLE_EQ(run(o).component("activations_kept"), 0.5 * GiB);
  o.checkpointing = false;
  o.flash_attention = true;
  EXPECT_DOUBLE_EQ(run(o).component("activations"), 8.5 * GiB);
}

TEST(Estimate, ModelStatesPerOptimizer) {
  EstimateOptions o = llama7b("train");
  const std::pair<const char*, double> expected[] = {{"sgd", 56e9},   {"sgd-momentum", 84e9}, {"lion", 84e9},
                                                     {"adam", 112e9}, {"adamw", 112e9},       {"adam8bit", 70e9}};
  for (auto [optimizer, bytes] : expected) {
    o.optimizer = optimizer;
    EXPECT_DOUBLE_EQ(run(o).component("model_states"), bytes) << optimizer;
  }
  // Pure fp32 keeps no master copy but the same Adam total: 4 + 4 + 8.
  o.optimizer = "adam";
  o.precision = "fp32";
  EXPECT_DOUBLE_EQ(run(o).component("master_weights"), 0);
  EXPECT_DOUBLE_EQ(run(o).component("model_states"), 112e9);
  // Adafactor: 8P plus a row and a column per matrix.
  o.precision = "bf16";
  o.optimizer = "adafactor";
  Estimate adafactor = run(o);
  EXPECT_GT(adafactor.component("model_states"), 56e9);
  EXPECT_LT(adafactor.component("model_states"), 56.1e9);
}

TEST(Estimate, WeightsByPrecision) {
  EstimateOptions o = llama7b("infer");
  const std::pair<const char*, double> expected[] = {{"fp32", 28e9}, {"bf16", 14e9}, {"int8", 7e9}, {"int4", 3.5e9}};
  for (auto [precision, bytes] : expected) {
    o.precision = precision;
    EXPECT_DOUBLE_EQ(run(o).component("weights"), bytes) << precision;
  }
}

TEST(Estimate, ShardingDividesModelStates) {
  EstimateOptions o = llama7b("train");
  o.optimizer = "adam";
  double one = run(o).component("model_states");
  o.gpus = 8;
  o.zero = 3;
  EXPECT_DOUBLE_EQ(run(o).component("model_states"), one / 8);
  o.zero = 1;  // optimizer states only: 2 + 2 + 12/8
  EXPECT_DOUBLE_EQ(run(o).component("model_states"), 7e9 * (4 + 12.0 / 8));
  o.zero = 0;
  o.tp = 2;  // tensor parallel shards everything, and with --sp the activations too
  o.gpus = 2;
  o.sequence_parallel = true;
  o.flash_attention = true;
  EXPECT_DOUBLE_EQ(run(o).component("model_states"), one / 2);
  EXPECT_DOUBLE_EQ(run(o).component("activations"), 8.5 * GiB / 2);
  o.offload = "optimizer";
  EXPECT_DOUBLE_EQ(run(o).component("optimizer_state"), 0);
}

TEST(Estimate, ParametersFromShapes) {
  EXPECT_DOUBLE_EQ(model_preset("llama-2-7b")->parameters(), 6738415616.0);
  EXPECT_DOUBLE_EQ(model_preset("gpt2")->parameters(), 124439808.0);
  EXPECT_DOUBLE_EQ(model_preset("llama-3-8b")->parameters(), 8030261248.0);
  EXPECT_DOUBLE_EQ(model_preset("Mistral-7B")->parameters(), 7241732096.0);
  EXPECT_FALSE(model_preset("llama-9-1t"));
}

TEST(Estimate, ConfigJsonLikeThePreset) {
  nlohmann::json config = {{"model_type", "llama"},      {"num_hidden_layers", 32},     {"hidden_size", 4096},
                           {"num_attention_heads", 32},  {"num_key_value_heads", 8},    {"vocab_size", 128256},
                           {"intermediate_size", 14336}, {"tie_word_embeddings", false}};
  std::string error;
  auto shape = model_from_config(config, error);
  ASSERT_TRUE(shape) << error;
  EXPECT_DOUBLE_EQ(shape->parameters(), model_preset("llama-3-8b")->parameters());
  EXPECT_FALSE(model_from_config(nlohmann::json{{"hidden_size", 10}}, error));
  EXPECT_NE(error.find("num_hidden_layers"), std::string::npos);
}

TEST(Estimate, VerdictAndWhatWouldMakeItFit) {
  EstimateOptions o = llama7b("train");
  o.optimizer = "adam";
  o.gpu = "H100-80GB";
  Estimate e = run(o);
  ASSERT_TRUE(e.gpu_memory);
  EXPECT_GT(e.total, static_cast<double>(*e.gpu_memory));
  ASSERT_FALSE(e.fixes.empty());
  for (const auto& fix : e.fixes) EXPECT_LE(fix.total, static_cast<double>(*e.gpu_memory)) << fix.option;
  o.gpu = "H200";
  o.flash_attention = true;
  o.checkpointing = true;
  o.optimizer = "adam8bit";
  Estimate fits = run(o);
  EXPECT_LT(fits.total, static_cast<double>(*fits.gpu_memory));
  EXPECT_TRUE(to_json(fits)["fits"].get<bool>());

  std::string error;
  Estimate bad;
  o.gpu = "GTX-280";
  EXPECT_FALSE(estimate(*model_preset("gpt2"), o, bad, error));
  EXPECT_NE(error.find("unknown GPU"), std::string::npos);
  o.gpu.reset();
  o.tp = 3;
  EXPECT_FALSE(estimate(*model_preset("gpt2"), o, bad, error));
}

}  // namespace
