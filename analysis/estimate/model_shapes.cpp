// Model shapes: built-in presets and Hugging Face style config.json files.
#include <cctype>
#include <map>

#include "memtrace/estimate/estimate.h"

namespace memtrace {

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

ModelShape llama(const char* name, int64_t layers, int64_t hidden, int64_t heads, int64_t kv_heads, int64_t vocab,
                 int64_t intermediate, int64_t max_context) {
  ModelShape m;
  m.max_context = max_context;
  m.name = name;
  m.layers = layers;
  m.hidden = hidden;
  m.heads = heads;
  m.kv_heads = kv_heads;
  m.head_dim = hidden / heads;
  m.vocab = vocab;
  m.intermediate = intermediate;
  return m;
}

ModelShape gpt2(const char* name, int64_t layers, int64_t hidden, int64_t heads) {
  ModelShape m = llama(name, layers, hidden, heads, heads, 50257, 4 * hidden, 1024);
  m.positions = 1024;
  m.gated_mlp = false;
  m.tied_embeddings = true;
  m.biases = true;
  return m;
}

const std::map<std::string, ModelShape>& presets() {
  static const std::map<std::string, ModelShape> table = {
      {"llama-2-7b", llama("Llama-2-7B", 32, 4096, 32, 32, 32000, 11008, 4096)},
      {"llama-2-13b", llama("Llama-2-13B", 40, 5120, 40, 40, 32000, 13824, 4096)},
      {"llama-2-70b", llama("Llama-2-70B", 80, 8192, 64, 8, 32000, 28672, 4096)},
      {"llama-3-8b", llama("Llama-3-8B", 32, 4096, 32, 8, 128256, 14336, 8192)},
      {"llama-3-70b", llama("Llama-3-70B", 80, 8192, 64, 8, 128256, 28672, 8192)},
      {"mistral-7b", llama("Mistral-7B", 32, 4096, 32, 8, 32000, 14336, 32768)},
      {"gpt2", gpt2("GPT-2", 12, 768, 12)},
      {"gpt2-medium", gpt2("GPT-2 medium", 24, 1024, 16)},
      {"gpt2-large", gpt2("GPT-2 large", 36, 1280, 20)},
      {"gpt2-xl", gpt2("GPT-2 XL", 48, 1600, 25)},
  };
  return table;
}

int64_t get(const nlohmann::json& j, std::initializer_list<const char*> keys, int64_t fallback) {
  for (const char* k : keys)
    if (j.contains(k) && j[k].is_number_integer()) return j[k].get<int64_t>();
  return fallback;
}

}  // namespace

double ModelShape::parameters() const {
  const double h = static_cast<double>(hidden), i = static_cast<double>(intermediate);
  const double q = static_cast<double>(heads * head_dim), kv = static_cast<double>(kv_heads * head_dim);
  double attention = h * q + 2 * h * kv + q * h;  // q, k, v, o
  double mlp = (gated_mlp ? 3 : 2) * h * i;
  double norms = 2 * h;
  if (biases) {
    attention += q + 2 * kv + h;
    mlp += i + h;
    norms *= 2;  // layer norms have a bias too
  }
  double embeddings = static_cast<double>(vocab) * h * (tied_embeddings ? 1 : 2) + static_cast<double>(positions) * h;
  double final_norm = biases ? 2 * h : h;
  return static_cast<double>(layers) * (attention + mlp + norms) + embeddings + final_norm;
}

std::optional<ModelShape> model_preset(const std::string& name) {
  auto it = presets().find(lower(name));
  if (it == presets().end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const auto& [key, m] : presets()) names.push_back(key);
  return names;
}

std::optional<ModelShape> model_from_config(const nlohmann::json& c, std::string& error) {
  ModelShape m;
  m.name = c.contains("_name_or_path") && c["_name_or_path"].is_string() ? c["_name_or_path"].get<std::string>()
           : c.contains("model_type") && c["model_type"].is_string()     ? c["model_type"].get<std::string>()
                                                                         : "config.json";
  m.layers = get(c, {"num_hidden_layers", "n_layer", "num_layers"}, 0);
  m.hidden = get(c, {"hidden_size", "n_embd", "d_model"}, 0);
  m.heads = get(c, {"num_attention_heads", "n_head"}, 0);
  m.kv_heads = get(c, {"num_key_value_heads"}, m.heads);
  m.head_dim = get(c, {"head_dim"}, m.heads ? m.hidden / m.heads : 0);
  m.vocab = get(c, {"vocab_size"}, 0);
  m.intermediate = get(c, {"intermediate_size", "n_inner", "ffn_dim"}, 4 * m.hidden);
  m.max_context = get(c, {"max_position_embeddings", "n_positions", "n_ctx", "seq_length"}, 0);
  std::string type = c.contains("model_type") && c["model_type"].is_string() ? c["model_type"].get<std::string>() : "";
  if (type == "gpt2") {
    m.gated_mlp = false;
    m.biases = true;
    m.positions = get(c, {"n_positions", "max_position_embeddings"}, 1024);
  }
  m.tied_embeddings = c.contains("tie_word_embeddings") ? c["tie_word_embeddings"].get<bool>() : type == "gpt2";
  for (auto [value, key] : {std::pair{m.layers, "num_hidden_layers"},
                            {m.hidden, "hidden_size"},
                            {m.heads, "num_attention_heads"},
                            {m.vocab, "vocab_size"}}) {
    if (value <= 0) {
      error = std::string("config.json has no usable ") + key;
      return std::nullopt;
    }
  }
  return m;
}

}  // namespace memtrace
