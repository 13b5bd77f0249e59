#include "memtrace/estimate/estimate.h"

#include <strings.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <map>

#include "memtrace/base/units.h"

namespace memtrace {

namespace {

double precision_bytes(const std::string& p) {
  if (p == "fp32") return 4;
  if (p == "bf16" || p == "fp16") return 2;
  if (p == "fp8" || p == "int8") return 1;
  if (p == "int4") return 0.5;
  return 0;
}

const std::map<std::string, uint64_t>& gpu_table() {
  // Memory as nvidia-smi reports it (MiB).
  static const std::map<std::string, uint64_t> table = {
      {"H100-80GB", 81559ull << 20}, {"H200", 143771ull << 20},     {"A100-40GB", 40960ull << 20},
      {"A100-80GB", 81920ull << 20}, {"L40S", 46068ull << 20},      {"RTX-4090", 24564ull << 20},
      {"RTX-3090", 24576ull << 20},  {"V100-32GB", 32768ull << 20}, {"V100-16GB", 16384ull << 20},
      {"T4", 15360ull << 20},        {"B200", 183359ull << 20},
  };
  return table;
}

std::string fmt(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", v);
  return text;
}

// Adafactor's factored second moment: a row and a column vector per matrix, fp32.
double adafactor_state(const ModelShape& m) {
  const double h = static_cast<double>(m.hidden), i = static_cast<double>(m.intermediate);
  const double q = static_cast<double>(m.heads * m.head_dim), kv = static_cast<double>(m.kv_heads * m.head_dim);
  double per_layer = (h + q) + 2 * (h + kv) + (q + h) + (m.gated_mlp ? 3 : 2) * (h + i) + 2 * h;
  double embeddings = (static_cast<double>(m.vocab) + h) * (m.tied_embeddings ? 1 : 2);
  return 4 * (static_cast<double>(m.layers) * per_layer + embeddings);
}

struct Builder {
  std::vector<Component>& out;
  void add(const std::string& name, const std::string& formula, double bytes) { out.push_back({name, formula, bytes}); }
};

}  // namespace

double Estimate::component(const std::string& name) const {
  for (const Component& c : components)
    if (c.name == name) return c.bytes;
  return 0;
}

std::optional<uint64_t> gpu_memory_of(const std::string& name) {
  std::optional<uint64_t> by_prefix;  // "H100" for H100-80GB, when no other name starts so
  int prefixed = 0;
  for (const auto& [key, bytes] : gpu_table()) {
    if (strcasecmp(key.c_str(), name.c_str()) == 0) return bytes;
    if (!name.empty() && strncasecmp(key.c_str(), name.c_str(), name.size()) == 0 && ++prefixed == 1) by_prefix = bytes;
  }
  return prefixed == 1 ? by_prefix : std::nullopt;
}

std::vector<std::string> gpu_names() {
  std::vector<std::string> names;
  for (const auto& [key, bytes] : gpu_table()) names.push_back(key);
  return names;
}

namespace {

bool compute(const ModelShape& m, const EstimateOptions& o, Estimate& e, std::string& error) {
  const double wb = precision_bytes(o.precision);
  if (wb == 0) {
    error = "unknown precision '" + o.precision + "' (fp32, bf16, fp16, fp8, int8, int4)";
    return false;
  }
  if (o.tp < 1 || o.pp < 1 || o.gpus < 1 || o.gpus % (o.tp * o.pp) != 0) {
    error = "--gpus must be a multiple of --tp × --pp";
    return false;
  }
  if (o.zero < 0 || o.zero > 3) {
    error = "--zero takes 1, 2 or 3";
    return false;
  }
  if (o.offload == "params" && o.zero != 3) {
    error = "--offload params needs --zero 3 (parameters are gathered layer by layer)";
    return false;
  }
  const double P = o.params ? *o.params : m.parameters();
  const double L = static_cast<double>(m.layers), h = static_cast<double>(m.hidden);
  const double a = static_cast<double>(m.heads), V = static_cast<double>(m.vocab);
  const double t = static_cast<double>(o.tp), p = static_cast<double>(o.pp);
  const double dp = static_cast<double>(o.gpus / (o.tp * o.pp));
  const double shard = t * p;  // every parameter lives on one tensor- and pipeline-parallel rank
  const std::string Ps = o.params ? fmt(P) : "P";
  e.model = m;
  e.parameters = P;
  e.components.clear();
  Builder b{e.components};
  std::string per_gpu = shard > 1 ? " / " + fmt(shard) + " (tp×pp)" : "";

  if (o.mode == "infer") {
    b.add("weights", Ps + " × " + fmt(wb) + " (" + o.precision + ")" + per_gpu, P * wb / shard);
    const double kv_bytes = wb >= 2 ? wb : 2;  // weight-only quantization keeps a 16-bit cache
    const double per_token = 2 * L * static_cast<double>(m.kv_heads * m.head_dim) * kv_bytes;
    const double ctx = static_cast<double>(o.context), batch = static_cast<double>(o.batch);
    b.add("kv_cache",
          "2 × layers × kv_heads × head_dim × context × batch × " + fmt(kv_bytes) + " = " +
              format_bytes(uint64_t(per_token)) + " per token" + per_gpu,
          per_token * ctx * batch / shard);
    if (o.kv_block > 0) {
      double padded = std::ceil(ctx / static_cast<double>(o.kv_block)) * static_cast<double>(o.kv_block);
      b.add("kv_block_waste",
            "(context rounded up to " + std::to_string(o.kv_block) + "-token blocks − context) × per token × batch",
            (padded - ctx) * per_token * batch / shard);
    }
    b.add("activations",
          "one layer at prefill: batch × context × (4·h + 2·i) × 2, plus last-token logits batch × V × 4",
          (batch * ctx * (4 * h + 2 * static_cast<double>(m.intermediate)) * 2) / t + batch * V * 4);
  } else if (o.mode == "train") {
    const bool mixed = o.precision != "fp32";
    double opt_per_p = 0;
    std::string opt_formula;
    if (o.optimizer == "sgd")
      opt_formula = "none (plain SGD)";
    else if (o.optimizer == "sgd-momentum" || o.optimizer == "lion")
      opt_per_p = 4, opt_formula = Ps + " × 4 (momentum, fp32)";
    else if (o.optimizer == "adam" || o.optimizer == "adamw")
      opt_per_p = 8, opt_formula = Ps + " × 8 (m and v, fp32)";
    else if (o.optimizer == "adam8bit")
      opt_per_p = 2, opt_formula = Ps + " × 2 (m and v, 8-bit)";
    else if (o.optimizer == "adafactor")
      opt_formula = "factored second moment: (rows + columns) × 4 per matrix";
    else {
      error = "unknown optimizer '" + o.optimizer + "' (sgd, sgd-momentum, lion, adam, adamw, adam8bit, adafactor)";
      return false;
    }
    double opt = o.optimizer == "adafactor" ? adafactor_state(m) : opt_per_p * P;
    double weights = P * wb, grads = P * wb, master = mixed ? P * 4 : 0;
    // ZeRO shards over the data-parallel ranks: 1 optimizer states, 2 and gradients, 3 and weights.
    std::string zs = dp > 1 ? " / " + fmt(dp) + " (ZeRO)" : "";
    double zdp = dp;
    std::string w_formula = Ps + " × " + fmt(wb) + " (" + o.precision + ")" + per_gpu + (o.zero >= 3 ? zs : "");
    std::string g_formula = Ps + " × " + fmt(wb) + per_gpu + (o.zero >= 2 ? zs : "");
    std::string m_formula = mixed ? Ps + " × 4 (fp32 copy)" + per_gpu + (o.zero >= 1 ? zs : "") : "none (pure fp32)";
    weights /= shard * (o.zero >= 3 ? zdp : 1);
    grads /= shard * (o.zero >= 2 ? zdp : 1);
    master /= shard * (o.zero >= 1 ? zdp : 1);
    opt /= shard * (o.zero >= 1 ? zdp : 1);
    opt_formula += per_gpu + (o.zero >= 1 ? zs : "");
    if (o.offload == "optimizer" || o.offload == "params") {
      master = opt = 0;
      m_formula = opt_formula = "offloaded to the CPU";
    }
    if (o.offload == "params") {
      weights = P * wb / (L * shard);
      w_formula = "offloaded; one layer gathered: " + Ps + " × " + fmt(wb) + " / layers";
    }
    b.add("weights", w_formula, weights);
    b.add("gradients", g_formula, grads);
    b.add("master_weights", m_formula, master);
    b.add("optimizer_state", opt_formula, opt);
    b.add("model_states", "weights + gradients + master_weights + optimizer_state", weights + grads + master + opt);

    // Megatron's activations (Korthikanti et al.): per layer s·b·h·34 + 5·a·s²·b bytes, with
    // tensor parallelism s·b·h·(10 + 24/t) + 5·a·s²·b/t, with sequence parallelism all of it / t.
    const double s = static_cast<double>(o.seq), mb = static_cast<double>(o.micro_batch ? *o.micro_batch : o.batch);
    double linear = o.sequence_parallel ? 34 * s * mb * h / t : s * mb * h * (10 + 24 / t);
    double quadratic = o.flash_attention ? 0 : 5 * a * s * s * mb / t;
    std::string layer_formula = o.flash_attention ? "34·s·b·h" : "34·s·b·h + 5·a·s²·b";
    if (t > 1)
      layer_formula = o.sequence_parallel ? "(" + layer_formula + ") / tp" : "s·b·h·(10 + 24/tp) + 5·a·s²·b/tp";
    e.per_layer_linear = linear;
    e.per_layer_quadratic = quadratic;
    // A pipeline's first stage keeps pp micro-batches of layers/pp layers: all layers' worth.
    if (o.checkpointing) {
      double kept = 2 * s * mb * h * L / (o.sequence_parallel ? t : 1);
      b.add("activations_kept", "2·s·b·h per layer (checkpoints) × layers", kept);
      b.add("activations_recompute", "one layer recomputed: " + layer_formula, linear + quadratic);
      b.add("activations", "activations_kept + activations_recompute", kept + linear + quadratic);
    } else {
      b.add("activations", "layers × (" + layer_formula + ")", L * (linear + quadratic));
    }
    b.add("logits", "s·b·V × 4 (fp32 logits)" + std::string(t > 1 ? " / tp" : ""), s * mb * V * 4 / t);
  } else {
    error = "--mode is train or infer";
    return false;
  }
  b.add("cuda_context", "CUDA context (default, --cuda-context)", static_cast<double>(o.cuda_context));
  b.add("workspace", "cuBLAS/cuDNN workspace (default, --workspace)", static_cast<double>(o.workspace));
  double comm = o.comm_buffers ? static_cast<double>(*o.comm_buffers) : (o.gpus > 1 ? double(1ull << 30) : 0);
  if (comm > 0) b.add("comm_buffers", "NCCL communication buffers (default, --comm-buffers)", comm);

  e.total = 0;
  for (const Component& c : e.components)
    if (c.name != "model_states" && c.name != "activations_kept" && c.name != "activations_recompute")
      e.total += c.bytes;
  b.add("total", "sum of the above", e.total);
  return true;
}

}  // namespace

bool estimate(const ModelShape& model, const EstimateOptions& options, Estimate& out, std::string& error) {
  if (!compute(model, options, out, error)) return false;
  out.options = options;
  out.warnings.clear();
  const bool train = options.mode == "train";
  const int64_t tokens = train ? options.seq : options.context;
  if (model.max_context > 0 && tokens > model.max_context)
    out.warnings.push_back(std::string(train ? "the sequence length" : "the context") + " of " +
                           std::to_string(tokens) + " tokens" +
                           (options.given.count(train ? "seq" : "context") ? "" : " (the default)") + " exceeds " +
                           model.name + "'s context of " + std::to_string(model.max_context) + " tokens; set " +
                           (train ? "--seq" : "--context") + " to what you will run");
  out.gpu_name = options.gpu;
  out.gpu_memory = options.gpu_memory;
  if (options.gpu && !out.gpu_memory) {
    out.gpu_memory = gpu_memory_of(*options.gpu);
    if (!out.gpu_memory) {
      error = "unknown GPU '" + *options.gpu + "'; the GPUs memtrace knows:";
      for (const std::string& name : gpu_names()) error += " " + name;
      error += " (or give --gpu-memory SIZE)";
      return false;
    }
  }
  out.fixes.clear();
  if (!out.gpu_memory || out.total <= static_cast<double>(*out.gpu_memory)) return true;

  // What would make it fit, cheapest first: free switches, then recomputation, then sharding,
  // then offloading, then changes to the model or the work.
  using Change = std::pair<std::string, std::function<bool(EstimateOptions&)>>;
  std::vector<Change> changes;
  if (options.mode == "train") {
    changes = {
        {"--flash-attention", [](EstimateOptions& o) { return !o.flash_attention && (o.flash_attention = true); }},
        {"--checkpointing", [](EstimateOptions& o) { return !o.checkpointing && (o.checkpointing = true); }},
        {"--micro-batch (half)",
         [](EstimateOptions& o) {
           int64_t m = o.micro_batch ? *o.micro_batch : o.batch;
           if (m <= 1) return false;
           o.micro_batch = m / 2;
           return true;
         }},
        {"--optimizer adam8bit",
         [](EstimateOptions& o) {
           return (o.optimizer == "adam" || o.optimizer == "adamw") && (o.optimizer = "adam8bit", true);
         }},
        {"--zero 1", [](EstimateOptions& o) { return o.gpus > 1 && o.zero < 1 && (o.zero = 1); }},
        {"--zero 2", [](EstimateOptions& o) { return o.gpus > 1 && o.zero < 2 && (o.zero = 2); }},
        {"--zero 3", [](EstimateOptions& o) { return o.gpus > 1 && o.zero < 3 && (o.zero = 3); }},
        {"--offload optimizer",
         [](EstimateOptions& o) { return o.offload.empty() && (o.offload = "optimizer", true); }},
        {"--tp 2 (with --gpus ×2)", [](EstimateOptions& o) { return (o.tp *= 2, o.gpus *= 2, true); }},
        {"--pp 2 (with --gpus ×2)", [](EstimateOptions& o) { return (o.pp *= 2, o.gpus *= 2, true); }},
    };
  } else {
    changes = {
        {"--precision int8",
         [](EstimateOptions& o) { return precision_bytes(o.precision) > 1 && (o.precision = "int8", true); }},
        {"--precision int4",
         [](EstimateOptions& o) { return precision_bytes(o.precision) > 0.5 && (o.precision = "int4", true); }},
        {"--batch (half)", [](EstimateOptions& o) { return o.batch > 1 && (o.batch /= 2, true); }},
        {"--context (half)", [](EstimateOptions& o) { return o.context > 1 && (o.context /= 2, true); }},
        {"--tp 2 (with --gpus ×2)", [](EstimateOptions& o) { return (o.tp *= 2, o.gpus *= 2, true); }},
    };
  }
  const double limit = static_cast<double>(*out.gpu_memory);
  EstimateOptions combined = options;
  std::string combined_name;
  for (const auto& [name, apply] : changes) {
    EstimateOptions alone = options;
    Estimate trial;
    std::string ignored;
    if (apply(alone) && compute(model, alone, trial, ignored) && trial.total <= limit)
      out.fixes.push_back({name, trial.total});
  }
  if (out.fixes.empty()) {  // no single change is enough: the cheapest combination that is
    for (const auto& [name, apply] : changes) {
      if (!apply(combined)) continue;
      combined_name += (combined_name.empty() ? "" : " ") + name;
      Estimate trial;
      std::string ignored;
      if (compute(model, combined, trial, ignored) && trial.total <= limit) {
        out.fixes.push_back({combined_name, trial.total});
        break;
      }
    }
  }
  return true;
}

namespace {

// What an estimate assumed, each default marked: "training, sequence 2048 tokens (default), ...".
std::string assumptions_text(const EstimateOptions& o) {
  auto item = [&](const std::string& text, const char* option) {
    return text + (o.given.count(option) ? "" : " (default)");
  };
  const bool train = o.mode == "train";
  std::string out = item(train ? "training" : "inference", "mode");
  out += ", " + item((train ? "sequence " + std::to_string(o.seq) : "context " + std::to_string(o.context)) + " tokens",
                     train ? "seq" : "context");
  out += ", " + item("batch " + std::to_string(o.batch) + " per GPU", "batch");
  out += ", " + item(o.precision, "precision");
  if (train) out += ", " + item(o.optimizer, "optimizer");
  out += ", " + item(std::to_string(o.gpus) + " GPU" + (o.gpus > 1 ? "s" : ""), "gpus");
  return out;
}

}  // namespace

nlohmann::json to_json(const Estimate& e) {
  nlohmann::json components = nlohmann::json::object(), formulas = nlohmann::json::object();
  for (const Component& c : e.components) {
    components[c.name] = static_cast<uint64_t>(std::llround(c.bytes));
    formulas[c.name] = c.formula;
  }
  nlohmann::json out = {{"model",
                         {{"name", e.model.name},
                          {"parameters", e.parameters},
                          {"layers", e.model.layers},
                          {"hidden", e.model.hidden},
                          {"heads", e.model.heads},
                          {"kv_heads", e.model.kv_heads},
                          {"head_dim", e.model.head_dim},
                          {"vocab", e.model.vocab},
                          {"intermediate", e.model.intermediate}}},
                        {"components", components},
                        {"formulas", formulas},
                        {"total", static_cast<uint64_t>(std::llround(e.total))}};
  const EstimateOptions& o = e.options;
  out["assumptions"] = {{"mode", o.mode},           {"seq", o.seq},
                        {"context", o.context},     {"batch", o.batch},
                        {"precision", o.precision}, {"optimizer", o.optimizer},
                        {"gpus", o.gpus},           {"defaults", nlohmann::json::array()}};
  for (const char* option : {"mode", "seq", "context", "batch", "precision", "optimizer", "gpus"})
    if (!o.given.count(option)) out["assumptions"]["defaults"].push_back(option);
  out["warnings"] = e.warnings;
  if (e.model.max_context > 0) out["model"]["max_context"] = e.model.max_context;
  if (e.per_layer_linear > 0)
    out["activations_per_layer"] = {{"linear", static_cast<uint64_t>(std::llround(e.per_layer_linear))},
                                    {"quadratic", static_cast<uint64_t>(std::llround(e.per_layer_quadratic))}};
  if (e.gpu_memory) {
    out["gpu"] = {{"name", e.gpu_name ? *e.gpu_name : "custom"}, {"memory_bytes", *e.gpu_memory}};
    out["fits"] = e.total <= static_cast<double>(*e.gpu_memory);
    out["margin_bytes"] = static_cast<int64_t>(static_cast<double>(*e.gpu_memory) - e.total);
    nlohmann::json fixes = nlohmann::json::array();
    for (const auto& f : e.fixes) fixes.push_back({{"option", f.option}, {"total", static_cast<uint64_t>(f.total)}});
    out["would_fit_with"] = fixes;
  }
  return out;
}

std::string to_text(const Estimate& e) {
  char line[512];
  std::string out = e.model.name + ": " + format_count(e.parameters) + " parameters, per GPU:\n";
  out += "  assuming " + assumptions_text(e.options) + "\n";
  for (const std::string& w : e.warnings) out += "  WARNING: " + w + "\n";
  out += "\n";
  for (const Component& c : e.components) {
    std::snprintf(line, sizeof line, "  %-22s %12s   %s\n", c.name.c_str(),
                  format_bytes(uint64_t(std::llround(c.bytes))).c_str(), c.formula.c_str());
    out += line;
  }
  if (e.gpu_memory) {
    std::string gpu = (e.gpu_name ? *e.gpu_name : "the GPU") + " (" + format_bytes(*e.gpu_memory) + ")";
    double margin = static_cast<double>(*e.gpu_memory) - e.total;
    if (margin >= 0) {
      out += "\nfits on " + gpu + ", with " + format_bytes(uint64_t(margin)) + " to spare\n";
    } else {
      out += "\ndoes not fit on " + gpu + ": " + format_bytes(uint64_t(-margin)) + " too much\n";
      if (e.fixes.empty()) out += "none of the usual options makes it fit\n";
      for (const auto& f : e.fixes)
        out += "  would fit with " + f.option + " (" + format_bytes(uint64_t(f.total)) + ")\n";
    }
  }
  return out;
}

}  // namespace memtrace
