// A program with a CUPTI tool of its own, as one run under PyTorch's profiler or Nsight is: it
// subscribes to CUPTI, counts the cudaMalloc calls it is called back for, and says how its
// subscription went. memtrace must leave it working: CUPTI 13.0 takes one subscriber per process.
// With --several 1 it subscribes with cuptiSubscribe_v2 asking for several subscribers, as tools
// may where CUPTI 13.3 takes them.
//   cupti_tool [--subscribe-after N] [--several 1]   (N 0, the default: before any CUDA call)
#include <cuda_runtime_api.h>
#include <cupti.h>

#include <atomic>
#include <cstdio>

#include "memtrace/base/cupti_subscriber_params.h"
#include "sample_account.h"

namespace {

std::atomic<int> g_seen{0};

void CUPTIAPI on_callback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) {
  const auto* cb = static_cast<const CUpti_CallbackData*>(data);
  if (domain == CUPTI_CB_DOMAIN_RUNTIME_API && cbid == CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020 &&
      cb->callbackSite == CUPTI_API_EXIT)
    ++g_seen;
}

CUptiResult subscribe(bool several) {
  CUpti_SubscriberHandle subscriber;
  memtrace::cupti::SubscriberParams params{};
  params.base.structSize = sizeof params;
  params.base.subscriberName = "cupti_tool";
  params.allowMultipleSubscribers = 1;
  CUptiResult r = several ? cuptiSubscribe_v2(&subscriber, on_callback, nullptr, &params.base)
                          : cuptiSubscribe(&subscriber, on_callback, nullptr);
  if (r == CUPTI_SUCCESS)
    r = cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  const long after = sample::arg_value(argc, argv, "--subscribe-after", 0);
  const bool several = sample::arg_value(argc, argv, "--several", 0) != 0;
  sample::Account account;
  CUptiResult subscribed = after == 0 ? subscribe(several) : CUPTI_ERROR_NOT_INITIALIZED;
  for (long i = 0; i < 10; ++i) {
    if (after > 0 && i == after) subscribed = subscribe(several);
    void* p;
    SAMPLE_CHECK(cudaMalloc(&p, 1 << 20));
    account.call("cudaMalloc", true);
    account.live(0, 1 << 20);
    account.live(0, -(1 << 20));
    SAMPLE_CHECK(cudaFree(p));
    account.call("cudaFree", true);
  }
  std::printf("cupti_tool: subscribed %d, saw %d cudaMalloc calls\n", static_cast<int>(subscribed), g_seen.load());
  account.print();
  return subscribed == CUPTI_SUCCESS ? 0 : 3;
}
