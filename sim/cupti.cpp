// A stand-in libcupti.so.13 for the simulated device: the part of CUPTI memtrace uses, over the
// simulated driver's callbacks and memory activity (api_callbacks.h), which it reaches as NVIDIA's
// CUPTI reaches NVIDIA's driver: cuGetExportTable looked up with dlsym, and a private table
// (export_tables.h; ../shared/observed/cudart-13.0-driver-lookups.md). It calls back only for the
// callback ids enabled, and hands MEMORY2 activity records over in buffers the tool supplies, when
// it flushes them. cuptiFinalize aborts: memtrace must never call it (it would tear CUPTI down
// under other tools).
//
// Subscribers, as NVIDIA documents them (cupti_callbacks.h 13.0; for 13.3, the sources named in
// memtrace/base/cupti_subscriber_params.h). CUPTI 13.0 takes one at a time: a second gets
// CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED and, with cuptiSubscribe_v2, the first one's name.
// MEMTRACE_SIM_CUPTI_VERSION=130300 makes it CUPTI 13.3 (cuptiGetVersion says so), which takes
// several when the first asked for it with cuptiSubscribe_v2's allowMultipleSubscribers: a later
// one that asks too is added (each is called back for what it enabled; oldSubscriberName names the
// first), any other is refused, a cuptiSubscribe (v1) among them too ("mixing" the APIs). "Multiple
// subscriber support requires CUDA 13.3+ and driver r610+": a driver that says it supports less
// than CUDA 13.3 (cuDriverGetVersion, looked up with dlsym as NVIDIA's CUPTI looks it up; r610 is
// taken to be 13.3's driver) gets the request refused, with no subscriber named. That the choice
// resets once every subscriber left is not documented: assumed here.
// MEMTRACE_SIM_CUPTI_REFUSE_BEFORE_INIT=1 refuses a subscriber before cuInit
// (CUPTI_ERROR_NOT_INITIALIZED, what CUPTI returns when it cannot reach the driver): a fault to
// test a tool with; NVIDIA documents no such refusal ("you can invoke the first CUPTI function at
// any point", the CUPTI usage guide, 2.2).
#include <cupti.h>
#include <dlfcn.h>
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

#include "export_tables.h"
#include "memtrace/base/cupti_subscriber_params.h"

struct CUpti_Subscriber_st {
  CUpti_CallbackFunc callback = nullptr;
  void* userdata = nullptr;
  std::string name;
  std::atomic<bool> enabled[3][1024] = {};  // [domain][cbid]: the driver's and the runtime's
};

namespace {

// The subscribers, and whether the first asked for several; written under g_mutex. The callbacks
// read a copy, replaced whole (the old ones are never freed: a callback may still read them).
std::mutex g_mutex;
std::vector<CUpti_Subscriber_st*> g_subscribers;
bool g_several = false;
using Subscribers = std::vector<CUpti_Subscriber_st*>;
std::atomic<const Subscribers*> g_current{new Subscribers};
std::atomic<uint32_t> g_correlation{0};

uint32_t version() {
  static const uint32_t v = [] {
    const char* text = ::secure_getenv("MEMTRACE_SIM_CUPTI_VERSION");
    return text && *text ? static_cast<uint32_t>(std::strtoul(text, nullptr, 10)) : uint32_t{CUPTI_API_VERSION};
  }();
  return v;
}

void* driver_library() {
  static void* library = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  return library;
}

// The CUDA version the driver supports, 0 if it cannot say.
int driver_version() {
  auto get = driver_library() ? reinterpret_cast<CUresult (*)(int*)>(::dlsym(driver_library(), "cuDriverGetVersion"))
                              : nullptr;
  int v = 0;
  return get && get(&v) == CUDA_SUCCESS ? v : 0;
}
constexpr int kMultipleSubscribersDriver = 13030;

// The driver's table for CUPTI, null when there is no driver.
const sim::SimCuptiHooks* driver() {
  static const sim::SimCuptiHooks* table = [] {
    void* library = driver_library();
    auto get = library
                   ? reinterpret_cast<CUresult (*)(const void**, const CUuuid*)>(::dlsym(library, "cuGetExportTable"))
                   : nullptr;
    const void* t = nullptr;
    if (!get || get(&t, &sim::kSimCuptiTable) != CUDA_SUCCESS || !t)
      return static_cast<const sim::SimCuptiHooks*>(nullptr);
    return static_cast<const sim::SimCuptiHooks*>(t);
  }();
  return table;
}

bool refused_before_init() {
  static const bool refuse = [] {
    const char* v = ::secure_getenv("MEMTRACE_SIM_CUPTI_REFUSE_BEFORE_INIT");
    return v && std::strcmp(v, "1") == 0;
  }();
  return refuse && !(driver() && driver()->initialized());
}

// With g_mutex held.
void publish_subscribers() { g_current.store(new Subscribers(g_subscribers), std::memory_order_release); }

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
  if (domain < 0 || domain > 2 || cbid < 0 || cbid >= 1024) return;
  static thread_local uint32_t correlation = 0;
  if (site == 0) correlation = g_correlation.fetch_add(1) + 1;
  for (CUpti_Subscriber_st* s : *g_current.load(std::memory_order_acquire)) {
    if (!s->enabled[domain][cbid].load()) continue;
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
  if (const sim::SimCuptiHooks* d = driver()) {
    d->set_api_callback(on_api);
    d->set_memory_activity(on_memory);
  }
}

// A subscriber, by cuptiSubscribe (V2: false) or cuptiSubscribe_v2 (PARAMS may be null).
CUptiResult subscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback, void* userdata, bool v2,
                      CUpti_SubscriberParams* params) {
  if (!subscriber || !callback) return CUPTI_ERROR_INVALID_PARAMETER;
  if (refused_before_init()) return CUPTI_ERROR_NOT_INITIALIZED;
  const bool asks =
      v2 && version() >= memtrace::cupti::kMultipleSubscribersVersion && memtrace::cupti::asks_for_several(params);
  if (asks && driver_version() < kMultipleSubscribersDriver) return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
  std::lock_guard lock(g_mutex);
  if (!g_subscribers.empty()) {
    if (params && params->oldSubscriberName && params->oldSubscriberSize > 0)
      std::snprintf(params->oldSubscriberName, params->oldSubscriberSize, "%s", g_subscribers.front()->name.c_str());
    if (!g_several || !asks) return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
  } else {
    g_several = asks;
  }
  auto* s = new CUpti_Subscriber_st;
  s->callback = callback;
  s->userdata = userdata;
  s->name = std::string("CUPTI for ") + (params && params->subscriberName ? params->subscriberName : "a tool");
  g_subscribers.push_back(s);
  publish_subscribers();
  install_hooks();
  *subscriber = s;
  return CUPTI_SUCCESS;
}

}  // namespace

extern "C" {

CUptiResult cuptiGetVersion(uint32_t* v) {
  if (!v) return CUPTI_ERROR_INVALID_PARAMETER;
  *v = version();
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
  return subscribe(subscriber, callback, userdata, true, params);
}

CUptiResult cuptiSubscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback, void* userdata) {
  return subscribe(subscriber, callback, userdata, false, nullptr);
}

CUptiResult cuptiUnsubscribe(CUpti_SubscriberHandle subscriber) {
  std::lock_guard lock(g_mutex);
  auto it = std::find(g_subscribers.begin(), g_subscribers.end(), subscriber);
  if (!subscriber || it == g_subscribers.end()) return CUPTI_ERROR_INVALID_PARAMETER;
  g_subscribers.erase(it);  // not freed: a callback may still be reading it on another thread
  publish_subscribers();
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
