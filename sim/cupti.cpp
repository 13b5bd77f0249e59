// A stand-in libcupti.so.13 for the simulated device: the part of CUPTI memtrace uses, over the
// simulated driver's callbacks and memory activity (api_callbacks.h). Like NVIDIA's, it takes one
// subscriber at a time (a second gets CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED and, with
// cuptiSubscribe_v2, the first one's name), calls back only for the callback ids enabled, and
// hands MEMORY2 activity records over in buffers the tool supplies, when it flushes them.
// cuptiFinalize aborts: memtrace must never call it (it would tear CUPTI down under other tools).
#include <cupti.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <string>
#include <vector>

#include "api_callbacks.h"

struct CUpti_Subscriber_st {
  CUpti_CallbackFunc callback = nullptr;
  void* userdata = nullptr;
  std::string name;
  std::atomic<bool> enabled[3][1024] = {};  // [domain][cbid]: the driver's and the runtime's
};

namespace {

std::mutex g_mutex;
CUpti_Subscriber_st* g_subscriber = nullptr;  // written under g_mutex
std::atomic<CUpti_Subscriber_st*> g_current{nullptr};
std::atomic<uint32_t> g_correlation{0};

struct Activity {
  std::atomic<bool> memory{false};
  CUpti_BuffersCallbackRequestFunc request = nullptr;
  CUpti_BuffersCallbackCompleteFunc complete = nullptr;
  std::mutex mutex;
  std::vector<CUpti_ActivityMemory4> pending;
};
Activity& activity() {
  static Activity* a = new Activity;  // never destroyed: records may come during exit
  return *a;
}

uint64_t now_ns() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

void on_api(int domain, int cbid, int site, const char* name, const void* params, const void* result) {
  CUpti_Subscriber_st* s = g_current.load(std::memory_order_acquire);
  if (!s || domain < 0 || domain > 2 || cbid < 0 || cbid >= 1024 || !s->enabled[domain][cbid].load()) return;
  static thread_local uint32_t correlation = 0;
  if (site == 0) correlation = g_correlation.fetch_add(1) + 1;
  uint64_t correlation_data = 0;
  CUpti_CallbackData data{};
  data.callbackSite = site == 0 ? CUPTI_API_ENTER : CUPTI_API_EXIT;
  data.functionName = name;
  data.functionParams = params;
  data.functionReturnValue = const_cast<void*>(result);
  data.correlationData = &correlation_data;
  data.correlationId = correlation;
  s->callback(s->userdata, static_cast<CUpti_CallbackDomain>(domain), static_cast<CUpti_CallbackId>(cbid), &data);
}

void on_memory(int released, int memory_kind, uint64_t address, uint64_t bytes, int device) {
  Activity& a = activity();
  if (!a.memory.load(std::memory_order_acquire)) return;
  CUpti_ActivityMemory4 r{};
  r.kind = CUPTI_ACTIVITY_KIND_MEMORY2;
  r.memoryOperationType =
      released ? CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE : CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION;
  r.memoryKind = static_cast<CUpti_ActivityMemoryKind>(memory_kind);
  r.address = address;
  r.bytes = bytes;
  r.timestamp = now_ns();
  r.processId = static_cast<uint32_t>(::getpid());
  r.deviceId = device < 0 ? 0 : static_cast<uint32_t>(device);
  std::lock_guard lock(a.mutex);
  a.pending.push_back(r);
}

// A forked child: what real CUPTI does there is undefined, as is any CUDA use in a forked child
// before exec (NVIDIA's CUDA C++ Guidelines 3.0.1, rule CUDA-1.6). The stand-in keeps its copy of
// the subscription in memory and calls the subscriber, the harder case for memtrace (which must
// then ignore it: cupti_backend.cpp, forget_cupti_in_child); no lock a parent thread held at the
// fork stays held, and the parent's activity records are not the child's.
void reset_after_fork() {
  new (&g_mutex) std::mutex;
  Activity& a = activity();
  new (&a.mutex) std::mutex;
  a.pending.clear();
}
__attribute__((constructor)) void install_fork_handler() { ::pthread_atfork(nullptr, nullptr, reset_after_fork); }

void install_hooks() {
  memtrace_sim_set_api_callback(on_api);
  memtrace_sim_set_memory_activity(on_memory);
}

}  // namespace

extern "C" {

CUptiResult cuptiGetVersion(uint32_t* version) {
  if (!version) return CUPTI_ERROR_INVALID_PARAMETER;
  *version = CUPTI_API_VERSION;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiGetResultString(CUptiResult result, const char** str) {
  if (!str) return CUPTI_ERROR_INVALID_PARAMETER;
  switch (result) {
    case CUPTI_SUCCESS: *str = "CUPTI_SUCCESS"; break;
    case CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED: *str = "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"; break;
    case CUPTI_ERROR_INVALID_PARAMETER: *str = "CUPTI_ERROR_INVALID_PARAMETER"; break;
    default: *str = "CUPTI_ERROR_UNKNOWN"; break;
  }
  return CUPTI_SUCCESS;
}

CUptiResult cuptiSubscribe_v2(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback, void* userdata,
                              CUpti_SubscriberParams* params) {
  if (!subscriber || !callback) return CUPTI_ERROR_INVALID_PARAMETER;
  std::lock_guard lock(g_mutex);
  if (g_subscriber) {
    if (params && params->oldSubscriberName && params->oldSubscriberSize > 0)
      std::snprintf(params->oldSubscriberName, params->oldSubscriberSize, "%s", g_subscriber->name.c_str());
    return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
  }
  auto* s = new CUpti_Subscriber_st;
  s->callback = callback;
  s->userdata = userdata;
  s->name = std::string("CUPTI for ") + (params && params->subscriberName ? params->subscriberName : "a tool");
  g_subscriber = s;
  g_current.store(s, std::memory_order_release);
  install_hooks();
  *subscriber = s;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiSubscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback, void* userdata) {
  return cuptiSubscribe_v2(subscriber, callback, userdata, nullptr);
}

CUptiResult cuptiUnsubscribe(CUpti_SubscriberHandle subscriber) {
  std::lock_guard lock(g_mutex);
  if (!subscriber || subscriber != g_subscriber) return CUPTI_ERROR_INVALID_PARAMETER;
  g_current.store(nullptr, std::memory_order_release);
  g_subscriber = nullptr;  // not freed: a callback may still be reading it on another thread
  return CUPTI_SUCCESS;
}

CUptiResult cuptiEnableCallback(uint32_t enable, CUpti_SubscriberHandle subscriber, CUpti_CallbackDomain domain,
                                CUpti_CallbackId cbid) {
  if (!subscriber || domain < 0 || domain > 2 || cbid >= 1024) return CUPTI_ERROR_INVALID_PARAMETER;
  subscriber->enabled[domain][cbid].store(enable != 0);
  return CUPTI_SUCCESS;
}

CUptiResult cuptiEnableDomain(uint32_t enable, CUpti_SubscriberHandle subscriber, CUpti_CallbackDomain domain) {
  if (!subscriber || domain < 0 || domain > 2) return CUPTI_ERROR_INVALID_PARAMETER;
  for (auto& e : subscriber->enabled[domain]) e.store(enable != 0);
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc request,
                                           CUpti_BuffersCallbackCompleteFunc complete) {
  if (!request || !complete) return CUPTI_ERROR_INVALID_PARAMETER;
  activity().request = request;
  activity().complete = complete;
  install_hooks();
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityEnable(CUpti_ActivityKind kind) {
  if (kind == CUPTI_ACTIVITY_KIND_MEMORY2) activity().memory.store(true);
  return kind == CUPTI_ACTIVITY_KIND_MEMORY2 || kind == CUPTI_ACTIVITY_KIND_MEMORY_POOL ? CUPTI_SUCCESS
                                                                                        : CUPTI_ERROR_NOT_SUPPORTED;
}

CUptiResult cuptiActivityDisable(CUpti_ActivityKind kind) {
  if (kind == CUPTI_ACTIVITY_KIND_MEMORY2) activity().memory.store(false);
  return CUPTI_SUCCESS;
}

// Hands every record held so far over, in as many of the tool's buffers as they take.
CUptiResult cuptiActivityFlushAll(uint32_t) {
  Activity& a = activity();
  if (!a.request || !a.complete) return CUPTI_SUCCESS;
  std::vector<CUpti_ActivityMemory4> records;
  {
    std::lock_guard lock(a.mutex);
    records.swap(a.pending);
  }
  size_t next = 0;
  while (next < records.size()) {
    uint8_t* buffer = nullptr;
    size_t size = 0, max_records = 0;
    a.request(&buffer, &size, &max_records);
    if (!buffer || size < sizeof(CUpti_ActivityMemory4)) return CUPTI_ERROR_INVALID_PARAMETER;
    size_t fits = size / sizeof(CUpti_ActivityMemory4);
    if (max_records && max_records < fits) fits = max_records;
    size_t count = std::min(fits, records.size() - next);
    std::memcpy(buffer, &records[next], count * sizeof(CUpti_ActivityMemory4));
    next += count;
    a.complete(nullptr, 0, buffer, size, count * sizeof(CUpti_ActivityMemory4));
  }
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityGetNextRecord(uint8_t* buffer, size_t valid_bytes, CUpti_Activity** record) {
  if (!buffer || !record) return CUPTI_ERROR_INVALID_PARAMETER;
  uint8_t* next = *record ? reinterpret_cast<uint8_t*>(*record) + sizeof(CUpti_ActivityMemory4) : buffer;
  if (next + sizeof(CUpti_ActivityMemory4) > buffer + valid_bytes) return CUPTI_ERROR_MAX_LIMIT_REACHED;
  *record = reinterpret_cast<CUpti_Activity*>(next);
  return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext, uint32_t, size_t* dropped) {
  if (dropped) *dropped = 0;
  return CUPTI_SUCCESS;
}

CUptiResult cuptiGetTimestamp(uint64_t* timestamp) {
  if (!timestamp) return CUPTI_ERROR_INVALID_PARAMETER;
  *timestamp = now_ns();
  return CUPTI_SUCCESS;
}

CUptiResult cuptiFinalize(void) {
  std::fprintf(stderr, "simulated CUPTI: cuptiFinalize was called; it tears CUPTI down under every other tool\n");
  std::abort();
}

}  // extern "C"
