// A training loop: parameters, gradients and optimizer state live for the whole run;
// activations live for one step; a workspace is taken and given back inside each step. Each step
// starts with an NVTX mark named memtrace.step, as a C++ trainer instrumented with NVTX marks them.
//   train_loop [--steps N] [--layers L] [--layer-mib M] [--leak-kib K] [--kill-at-step K]
// With --leak-kib, log_metrics keeps K KiB every step and never frees them (a leak). With
// --kill-at-step the program kills itself with SIGKILL in step K, after its forward pass.
#include <cuda_runtime_api.h>
#include <nvtx3/nvToolsExt.h>

#include <csignal>
#include <vector>

#include "sample_account.h"

namespace {

sample::Account account;

void* device_alloc(size_t bytes) {
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, bytes);
  account.call("cudaMalloc", e == cudaSuccess);
  SAMPLE_CHECK(e);
  account.live(0, static_cast<int64_t>(bytes));
  return p;
}

void device_free(void* p, size_t bytes) {
  cudaError_t e = cudaFree(p);
  account.call("cudaFree", e == cudaSuccess);
  SAMPLE_CHECK(e);
  account.live(0, -static_cast<int64_t>(bytes));
}

struct Model {
  std::vector<void*> weights, grads, adam_m, adam_v;
};

Model build_model(int layers, size_t layer_bytes) {
  Model m;
  for (int i = 0; i < layers; ++i) {
    m.weights.push_back(device_alloc(layer_bytes));
    m.grads.push_back(device_alloc(layer_bytes));
    m.adam_m.push_back(device_alloc(layer_bytes));
    m.adam_v.push_back(device_alloc(layer_bytes));
  }
  return m;
}

std::vector<void*> forward(int layers, size_t activation_bytes) {
  std::vector<void*> activations;
  for (int i = 0; i < layers; ++i) activations.push_back(device_alloc(activation_bytes));
  return activations;
}

void backward(std::vector<void*>& activations, size_t activation_bytes, size_t workspace_bytes) {
  void* workspace = device_alloc(workspace_bytes);
  for (auto it = activations.rbegin(); it != activations.rend(); ++it) device_free(*it, activation_bytes);
  device_free(workspace, workspace_bytes);
  activations.clear();
}

// The leak: a step's metrics, kept for a history nobody reads.
void log_metrics(std::vector<void*>& history, size_t bytes) {
  if (bytes) history.push_back(device_alloc(bytes));
}

}  // namespace

int main(int argc, char** argv) {
  const long steps = sample::arg_value(argc, argv, "--steps", 20);
  const int layers = static_cast<int>(sample::arg_value(argc, argv, "--layers", 8));
  const size_t layer_bytes = static_cast<size_t>(sample::arg_value(argc, argv, "--layer-mib", 16)) << 20;
  const size_t activation_bytes = layer_bytes / 2 + 4096;  // not a round number, on purpose
  const size_t workspace_bytes = 3 * layer_bytes;
  const long kill_at = sample::arg_value(argc, argv, "--kill-at-step", -1);
  const size_t leak_bytes = static_cast<size_t>(sample::arg_value(argc, argv, "--leak-kib", 0)) << 10;
  std::vector<void*> metrics_history;

  void* host_batch = nullptr;
  cudaError_t e = cudaMallocHost(&host_batch, 1 << 20);
  account.call("cudaMallocHost", e == cudaSuccess);
  SAMPLE_CHECK(e);

  Model model = build_model(layers, layer_bytes);
  for (long step = 0; step < steps; ++step) {
    nvtxMarkA("memtrace.step");
    account.call("nvtxMark", true);
    std::vector<void*> activations = forward(layers, activation_bytes);
    if (step == kill_at) {
      account.print();
      std::raise(SIGKILL);
    }
    backward(activations, activation_bytes, workspace_bytes);
    log_metrics(metrics_history, leak_bytes);
  }
  for (auto* group : {&model.weights, &model.grads, &model.adam_m, &model.adam_v})
    for (void* p : *group) device_free(p, layer_bytes);
  e = cudaFreeHost(host_batch);
  account.call("cudaFreeHost", e == cudaSuccess);
  account.print();
  return 0;
}
