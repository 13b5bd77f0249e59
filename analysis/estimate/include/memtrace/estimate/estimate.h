// `memtrace estimate`: GPU memory of a transformer's training or inference from the standard
// formulas (weights, KV cache, model states per optimizer, Megatron's activations, sharding),
// each component with its formula, and a verdict against a GPU.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace memtrace {

struct ModelShape {
  std::string name;
  int64_t layers = 0, hidden = 0, heads = 0, kv_heads = 0, head_dim = 0, vocab = 0, intermediate = 0;
  int64_t positions = 0;    // learned position embeddings (GPT-2); 0 for rotary
  int64_t max_context = 0;  // the longest sequence it was made for, in tokens; 0 when unknown
  bool gated_mlp = true;    // three MLP matrices (Llama, Mistral); two with biases (GPT-2)
  bool tied_embeddings = false;
  bool biases = false;
  double parameters() const;  // from the shapes
};

// Built-in shapes: Llama-2-7B/13B/70B, Llama-3-8B/70B, Mistral-7B, GPT-2 (small, medium, large, xl).
std::optional<ModelShape> model_preset(const std::string& name);
std::vector<std::string> model_preset_names();
// A Hugging Face style config.json. Returns nothing and sets ERROR when it lacks what is needed.
std::optional<ModelShape> model_from_config(const nlohmann::json& config, std::string& error);

struct EstimateOptions {
  std::string mode = "train";      // train | infer
  std::string precision = "bf16";  // fp32, bf16, fp16, fp8, int8, int4
  std::optional<double> params;    // nominal parameter count, overriding the shapes
  int64_t batch = 1;               // sequences per GPU step
  std::optional<int64_t> micro_batch;
  int64_t seq = 2048;               // training sequence length
  int64_t context = 4096;           // inference context length
  int64_t kv_block = 0;             // paged KV cache block, in tokens (0: not paged)
  std::string optimizer = "adamw";  // sgd, sgd-momentum, lion, adam, adamw, adam8bit, adafactor
  bool checkpointing = false, flash_attention = false, sequence_parallel = false;
  int64_t gpus = 1, zero = 0, tp = 1, pp = 1;
  std::string offload;  // "", optimizer, params
  uint64_t cuda_context = 512ull << 20;
  uint64_t workspace = 256ull << 20;     // cuBLAS/cuDNN
  std::optional<uint64_t> comm_buffers;  // default: 1 GiB when there is more than one GPU
  std::optional<std::string> gpu;        // a name from the GPU table
  std::optional<uint64_t> gpu_memory;
  std::set<std::string> given;  // the options set by the user ("seq", "batch", ...): the rest are defaults
};

struct Component {
  std::string name;
  std::string formula;
  double bytes = 0;
};

struct Estimate {
  ModelShape model;
  double parameters = 0;
  std::vector<Component> components;  // model_states and total included
  double total = 0;
  std::optional<std::string> gpu_name;
  std::optional<uint64_t> gpu_memory;
  struct Fix {
    std::string option;
    double total;
  };
  std::vector<Fix> fixes;             // when it does not fit: options that would make it, cheapest first
  EstimateOptions options;            // what it assumed
  std::vector<std::string> warnings;  // assumptions the model cannot meet (a sequence past its context)
  double per_layer_linear = 0, per_layer_quadratic = 0;  // training activations of one layer
  double component(const std::string& name) const;
};

// Computes the estimate; false with ERROR for options that make no sense together.
bool estimate(const ModelShape& model, const EstimateOptions& options, Estimate& out, std::string& error);
// A GPU's memory by its name, in any case, or by the start of one name alone ("H100").
std::optional<uint64_t> gpu_memory_of(const std::string& name);
std::vector<std::string> gpu_names();

nlohmann::json to_json(const Estimate& e);
std::string to_text(const Estimate& e);

}  // namespace memtrace
