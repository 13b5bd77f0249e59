// The injector as an NVTX injection library (NVTX_INJECTION64_PATH, set by memtrace run): the
// program's marks and ranges become events that name phases and steps, and allocators that
// describe their sub-allocations through NVTX's memory API (heaps and regions) feed the
// allocated layer. NVTX calls this library's InitializeInjection* once; we fill in the function
// slots we record, and leave the others empty, which NVTX turns into no-ops.
#define NVTX_NO_IMPL
#include <nvtx3/nvToolsExt.h>
#include <nvtx3/nvToolsExtMem.h>
#include <pthread.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_set>

#include "interpose.h"

namespace memtrace::inject {
namespace {

// Range push/pop return the nesting level; with an injection attached, that is ours to keep.
thread_local int t_range_level = 0;
std::atomic<uint64_t> g_next_range_id{1};

// Records a mark or a range edge: no stack (they come every step), just its place in the order.
void record_mark(Api api, uint64_t range_id, std::string_view name) {
  if (t_depth != 0) return;
  ++t_depth;
  if (session_active()) {
    Event e;
    e.api = api;
    e.kind = MemKind::kUnknown;
    e.addr = range_id;
    uint64_t seq = stamp(e);
    publish(e, seq, nullptr, name);
  }
  --t_depth;
}

// Wide messages keep their ASCII characters; others become '?'.
std::string narrow(const wchar_t* text) {
  std::string out;
  for (; text && *text && out.size() < 1024; ++text) out += *text > 0 && *text < 128 ? static_cast<char>(*text) : '?';
  return out;
}

// Registered strings: the handle we give back is a copy of the string, kept for the process's
// life. The lock is held across fork (taken before, released after on both sides), so a child
// never inherits it held by a thread that no longer exists, nor the set half-changed.
std::mutex g_strings_mutex;
std::unordered_set<std::string>* g_strings = new std::unordered_set<std::string>();

__attribute__((constructor)) void hold_strings_across_fork() {
  ::pthread_atfork([] { g_strings_mutex.lock(); }, [] { g_strings_mutex.unlock(); }, [] { g_strings_mutex.unlock(); });
}

const char* keep_string(const char* text) {
  std::lock_guard<std::mutex> lock(g_strings_mutex);
  return g_strings->insert(text ? text : "").first->c_str();
}

std::string message(const nvtxEventAttributes_t* a) {
  if (!a) return {};
  switch (a->messageType) {
    case NVTX_MESSAGE_TYPE_ASCII: return a->message.ascii ? a->message.ascii : "";
    case NVTX_MESSAGE_TYPE_UNICODE: return narrow(a->message.unicode);
    case NVTX_MESSAGE_TYPE_REGISTERED:
      return a->message.registered ? reinterpret_cast<const char*>(a->message.registered) : "";
    default: return {};
  }
}

// Core: the default domain.
void NVTX_API mark_ex(const nvtxEventAttributes_t* a) { record_mark(Api::kNvtxMark, 0, message(a)); }
void NVTX_API mark_a(const char* m) { record_mark(Api::kNvtxMark, 0, m ? m : ""); }
void NVTX_API mark_w(const wchar_t* m) { record_mark(Api::kNvtxMark, 0, narrow(m)); }

nvtxRangeId_t start_named(std::string_view name) {
  uint64_t id = g_next_range_id.fetch_add(1, std::memory_order_relaxed);
  record_mark(Api::kNvtxRangeStart, id, name);
  return id;
}
nvtxRangeId_t NVTX_API range_start_ex(const nvtxEventAttributes_t* a) { return start_named(message(a)); }
nvtxRangeId_t NVTX_API range_start_a(const char* m) { return start_named(m ? m : ""); }
nvtxRangeId_t NVTX_API range_start_w(const wchar_t* m) { return start_named(narrow(m)); }
void NVTX_API range_end(nvtxRangeId_t id) { record_mark(Api::kNvtxRangeEnd, id, {}); }

int push_named(std::string_view name) {
  record_mark(Api::kNvtxRangePush, 0, name);
  return t_range_level++;
}
int NVTX_API range_push_ex(const nvtxEventAttributes_t* a) { return push_named(message(a)); }
int NVTX_API range_push_a(const char* m) { return push_named(m ? m : ""); }
int NVTX_API range_push_w(const wchar_t* m) { return push_named(narrow(m)); }
int NVTX_API range_pop() {
  if (t_range_level == 0) return -1;  // as NVTX says of a pop without a push
  record_mark(Api::kNvtxRangePop, 0, {});
  return --t_range_level;
}

// Core2: named domains. Their events are recorded as the default domain's.
void NVTX_API domain_mark_ex(nvtxDomainHandle_t, const nvtxEventAttributes_t* a) { mark_ex(a); }
nvtxRangeId_t NVTX_API domain_range_start_ex(nvtxDomainHandle_t, const nvtxEventAttributes_t* a) {
  return start_named(message(a));
}
void NVTX_API domain_range_end(nvtxDomainHandle_t, nvtxRangeId_t id) { range_end(id); }
int NVTX_API domain_range_push_ex(nvtxDomainHandle_t, const nvtxEventAttributes_t* a) { return push_named(message(a)); }
int NVTX_API domain_range_pop(nvtxDomainHandle_t) { return range_pop(); }
nvtxStringHandle_t NVTX_API domain_register_string_a(nvtxDomainHandle_t, const char* s) {
  return reinterpret_cast<nvtxStringHandle_t>(const_cast<char*>(keep_string(s)));
}
nvtxStringHandle_t NVTX_API domain_register_string_w(nvtxDomainHandle_t, const wchar_t* s) {
  return reinterpret_cast<nvtxStringHandle_t>(const_cast<char*>(keep_string(narrow(s).c_str())));
}
nvtxDomainHandle_t NVTX_API domain_create_a(const char* name) {
  return reinterpret_cast<nvtxDomainHandle_t>(const_cast<char*>(keep_string(name)));
}
nvtxDomainHandle_t NVTX_API domain_create_w(const wchar_t* name) {
  return reinterpret_cast<nvtxDomainHandle_t>(const_cast<char*>(keep_string(narrow(name).c_str())));
}

// Memory: a heap's handle is its base address (a distinct dummy for a heap without one), so a
// region knows its heap and the collector needs no table of handles.
std::atomic<uint64_t> g_next_dummy_heap{1};

void record_memory(Api api, uint64_t addr, uint64_t size, uint64_t heap, uint64_t caller) {
  Call call(api, caller);
  if (!call.active()) return;
  call.event.addr = addr;
  call.event.size = size;
  call.event.heap = heap;
  call.finish(0);
}

nvtxMemHeapHandle_t NVTX_API heap_register(nvtxDomainHandle_t, const nvtxMemHeapDesc_t* desc) {
  uint64_t base = 0, size = 0;
  if (desc && desc->type == NVTX_MEM_TYPE_VIRTUAL_ADDRESS && desc->typeSpecificDesc &&
      desc->typeSpecificDescSize >= sizeof(nvtxMemVirtualRangeDesc_t)) {
    auto* range = static_cast<const nvtxMemVirtualRangeDesc_t*>(desc->typeSpecificDesc);
    base = reinterpret_cast<uint64_t>(range->ptr);
    size = range->size;
  }
  if (base == 0) return reinterpret_cast<nvtxMemHeapHandle_t>(g_next_dummy_heap.fetch_add(1));
  record_memory(Api::kNvtxMemHeapRegister, base, size, base, MEMTRACE_CALLER);
  return reinterpret_cast<nvtxMemHeapHandle_t>(base);
}

void NVTX_API heap_unregister(nvtxDomainHandle_t, nvtxMemHeapHandle_t heap) {
  record_memory(Api::kNvtxMemHeapUnregister, reinterpret_cast<uint64_t>(heap), 0, 0, MEMTRACE_CALLER);
}

void NVTX_API heap_reset(nvtxDomainHandle_t, nvtxMemHeapHandle_t heap) {
  record_memory(Api::kNvtxMemHeapReset, reinterpret_cast<uint64_t>(heap), 0, 0, MEMTRACE_CALLER);
}

void NVTX_API regions_register(nvtxDomainHandle_t, const nvtxMemRegionsRegisterBatch_t* batch) {
  if (!batch || batch->regionType != NVTX_MEM_TYPE_VIRTUAL_ADDRESS ||
      batch->regionDescElementSize < sizeof(nvtxMemVirtualRangeDesc_t) || !batch->regionDescElements)
    return;
  const uint64_t caller = MEMTRACE_CALLER;
  for (size_t i = 0; i < batch->regionCount; ++i) {
    auto* region = reinterpret_cast<const nvtxMemVirtualRangeDesc_t*>(
        static_cast<const char*>(batch->regionDescElements) + i * batch->regionDescElementSize);
    record_memory(Api::kNvtxMemRegionRegister, reinterpret_cast<uint64_t>(region->ptr), region->size,
                  reinterpret_cast<uint64_t>(batch->heap), caller);
    if (batch->regionHandleElementsOut)
      batch->regionHandleElementsOut[i] = reinterpret_cast<nvtxMemRegionHandle_t>(const_cast<void*>(region->ptr));
  }
}

void NVTX_API regions_unregister(nvtxDomainHandle_t, const nvtxMemRegionsUnregisterBatch_t* batch) {
  if (!batch || !batch->refElements || batch->refElementSize < sizeof(nvtxMemRegionRef_t)) return;
  const uint64_t caller = MEMTRACE_CALLER;
  for (size_t i = 0; i < batch->refCount; ++i) {
    auto* ref = reinterpret_cast<const nvtxMemRegionRef_t*>(reinterpret_cast<const char*>(batch->refElements) +
                                                            i * batch->refElementSize);
    // A handle is the region's pointer (regions_register), so both kinds of reference are one.
    record_memory(Api::kNvtxMemRegionUnregister, reinterpret_cast<uint64_t>(ref->pointer), 0, 0, caller);
  }
}

// Puts FN in slot ID of TABLE when the table has that slot.
template <typename Fn>
void fill(NvtxFunctionTable table, unsigned size, unsigned id, Fn fn) {
  if (table && id < size && table[id]) *table[id] = reinterpret_cast<NvtxFunctionPointer>(fn);
}

}  // namespace
}  // namespace memtrace::inject

using namespace memtrace::inject;

MEMTRACE_EXPORT int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table) {
  if (!get_export_table) return 0;
  auto* callbacks = static_cast<const NvtxExportTableCallbacks*>(get_export_table(NVTX_ETID_CALLBACKS));
  if (!callbacks || callbacks->struct_size < sizeof(NvtxExportTableCallbacks) || !callbacks->GetModuleFunctionTable)
    return 0;
  NvtxFunctionTable table = nullptr;
  unsigned size = 0;
  if (callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &table, &size)) {
    fill(table, size, NVTX_CBID_CORE_MarkEx, mark_ex);
    fill(table, size, NVTX_CBID_CORE_MarkA, mark_a);
    fill(table, size, NVTX_CBID_CORE_MarkW, mark_w);
    fill(table, size, NVTX_CBID_CORE_RangeStartEx, range_start_ex);
    fill(table, size, NVTX_CBID_CORE_RangeStartA, range_start_a);
    fill(table, size, NVTX_CBID_CORE_RangeStartW, range_start_w);
    fill(table, size, NVTX_CBID_CORE_RangeEnd, range_end);
    fill(table, size, NVTX_CBID_CORE_RangePushEx, range_push_ex);
    fill(table, size, NVTX_CBID_CORE_RangePushA, range_push_a);
    fill(table, size, NVTX_CBID_CORE_RangePushW, range_push_w);
    fill(table, size, NVTX_CBID_CORE_RangePop, range_pop);
  }
  table = nullptr;
  size = 0;
  if (callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &table, &size)) {
    fill(table, size, NVTX_CBID_CORE2_DomainMarkEx, domain_mark_ex);
    fill(table, size, NVTX_CBID_CORE2_DomainRangeStartEx, domain_range_start_ex);
    fill(table, size, NVTX_CBID_CORE2_DomainRangeEnd, domain_range_end);
    fill(table, size, NVTX_CBID_CORE2_DomainRangePushEx, domain_range_push_ex);
    fill(table, size, NVTX_CBID_CORE2_DomainRangePop, domain_range_pop);
    fill(table, size, NVTX_CBID_CORE2_DomainRegisterStringA, domain_register_string_a);
    fill(table, size, NVTX_CBID_CORE2_DomainRegisterStringW, domain_register_string_w);
    fill(table, size, NVTX_CBID_CORE2_DomainCreateA, domain_create_a);
    fill(table, size, NVTX_CBID_CORE2_DomainCreateW, domain_create_w);
  }
  return 1;
}

MEMTRACE_EXPORT int InitializeInjectionNvtxExtension(nvtxExtModuleInfo_t* info) {
  if (!info || info->moduleId != NVTX_EXT_MODULEID_MEM || info->segmentsCount < 1 || !info->segments) return 1;
  nvtxExtModuleSegment_t& segment = info->segments[0];
  auto set = [&](size_t id, auto fn) {
    if (id < segment.slotCount) segment.functionSlots[id] = reinterpret_cast<intptr_t>(fn);
  };
  set(NVTX3EXT_CBID_nvtxMemHeapRegister, heap_register);
  set(NVTX3EXT_CBID_nvtxMemHeapUnregister, heap_unregister);
  set(NVTX3EXT_CBID_nvtxMemHeapReset, heap_reset);
  set(NVTX3EXT_CBID_nvtxMemRegionsRegister, regions_register);
  set(NVTX3EXT_CBID_nvtxMemRegionsUnregister, regions_unregister);
  return 1;
}
