#include "estimate_options.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <utility>

#include "memtrace/base/units.h"

namespace memtrace::cli {

void add_estimate_options(CLI::App* cmd, EstimateCli& e) {
  e.command = cmd;
  cmd->add_option("--model", e.model,
                  "A built-in model: llama-2-7b, llama-2-13b, llama-2-70b, llama-3-8b, "
                  "llama-3-70b, mistral-7b, gpt2, gpt2-medium, gpt2-large, gpt2-xl");
  cmd->add_option("--config", e.config, "A Hugging Face style config.json");
  cmd->add_option("--mode", e.options.mode, "train or infer (default train)")->check(CLI::IsMember({"train", "infer"}));
  cmd->add_option("--precision", e.options.precision, "fp32, bf16, fp16, fp8, int8, int4 (default bf16)");
  cmd->add_option("--params", e.params, "Nominal parameter count, e.g. 7e9 (default: from the shapes)");
  cmd->add_option("--batch", e.options.batch, "Sequences per GPU (default 1)")->check(CLI::PositiveNumber);
  cmd->add_option("--micro-batch", e.micro_batch, "Micro-batch size with gradient accumulation");
  cmd->add_option("--seq", e.options.seq, "Training sequence length (default 2048)")->check(CLI::PositiveNumber);
  cmd->add_option("--context", e.options.context, "Inference context length (default 4096)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--kv-block", e.options.kv_block, "Paged KV cache block size in tokens");
  cmd->add_option("--optimizer", e.options.optimizer,
                  "sgd, sgd-momentum, lion, adam, adamw, adam8bit, adafactor (default adamw)");
  cmd->add_flag("--checkpointing", e.options.checkpointing, "Activation checkpointing");
  cmd->add_flag("--flash-attention", e.options.flash_attention, "FlashAttention (no s² attention scores)");
  cmd->add_flag("--sp", e.options.sequence_parallel, "Sequence parallelism (with --tp)");
  cmd->add_option("--gpus", e.options.gpus, "GPUs in all (default 1)")->check(CLI::PositiveNumber);
  cmd->add_option("--zero", e.options.zero, "ZeRO stage 1, 2 or 3 (3 is FSDP)")->check(CLI::Range(0, 3));
  cmd->add_option("--tp", e.options.tp, "Tensor parallel degree")->check(CLI::PositiveNumber);
  cmd->add_option("--pp", e.options.pp, "Pipeline parallel degree")->check(CLI::PositiveNumber);
  cmd->add_option("--offload", e.options.offload, "optimizer or params, to the CPU")
      ->check(CLI::IsMember({"optimizer", "params"}));
  cmd->add_option("--cuda-context", e.cuda_context, "CUDA context size (default 512MiB)");
  cmd->add_option("--workspace", e.workspace, "cuBLAS/cuDNN workspace (default 256MiB)");
  cmd->add_option("--comm-buffers", e.comm_buffers, "Communication buffers (default 1GiB with several GPUs)");
  cmd->add_option("--gpu", e.gpu, "H100-80GB, H200, A100-40GB, A100-80GB, L40S, RTX-4090, ...");
  cmd->add_option("--gpu-memory", e.gpu_memory, "The GPU's memory, e.g. 80GiB");
  cmd->add_flag("--json", e.json, "Print JSON");
}

namespace {

bool resolve_estimate(const char* command, EstimateCli& e, ModelShape& model) {
  auto fail = [&](const std::string& what) {
    std::fprintf(stderr, "memtrace %s: %s\n", command, what.c_str());
    return false;
  };
  if (e.model.empty() == e.config.empty()) return fail("give one of --model NAME or --config config.json");
  if (!e.model.empty()) {
    auto preset = model_preset(e.model);
    if (!preset) return fail("unknown model '" + e.model + "' (see --help for the built-in ones)");
    model = *preset;
  } else {
    std::ifstream in(e.config);
    if (!in) return fail("cannot read " + e.config);
    nlohmann::json config = nlohmann::json::parse(in, nullptr, false);
    if (config.is_discarded() || !config.is_object()) return fail(e.config + " is not a JSON object");
    std::string error;
    auto shape = model_from_config(config, error);
    if (!shape) return fail(error);
    model = *shape;
  }
  if (!e.params.empty()) {
    char* end = nullptr;
    double p = std::strtod(e.params.c_str(), &end);
    if (end == e.params.c_str() || *end || p <= 0) return fail("--params: '" + e.params + "' is not a count (try 7e9)");
    e.options.params = p;
  }
  for (const char* option : {"mode", "seq", "context", "batch", "precision", "optimizer", "gpus"})
    if (e.command && e.command->count(std::string("--") + option)) e.options.given.insert(option);
  if (!e.micro_batch.empty()) e.options.micro_batch = std::strtoll(e.micro_batch.c_str(), nullptr, 10);
  for (auto [text, target] :
       {std::pair{&e.cuda_context, &e.options.cuda_context}, {&e.workspace, &e.options.workspace}}) {
    if (text->empty()) continue;
    auto bytes = parse_size(*text);
    if (!bytes) return fail("'" + *text + "' is not a size");
    *target = *bytes;
  }
  if (!e.comm_buffers.empty()) {
    auto bytes = parse_size(e.comm_buffers);
    if (!bytes) return fail("'" + e.comm_buffers + "' is not a size");
    e.options.comm_buffers = bytes;
  }
  if (!e.gpu.empty()) e.options.gpu = e.gpu;
  if (!e.gpu_memory.empty()) {
    auto bytes = parse_size(e.gpu_memory);
    if (!bytes) return fail("--gpu-memory: '" + e.gpu_memory + "' is not a size");
    e.options.gpu_memory = bytes;
  }
  return true;
}

}  // namespace

bool estimate_from(const char* command, EstimateCli& e, Estimate& result) {
  ModelShape model;
  if (!resolve_estimate(command, e, model)) return false;
  std::string error;
  if (estimate(model, e.options, result, error)) return true;
  std::fprintf(stderr, "memtrace %s: %s\n", command, error.c_str());
  return false;
}

}  // namespace memtrace::cli
