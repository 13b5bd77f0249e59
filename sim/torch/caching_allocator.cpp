// The stand-in libc10_cuda.so's native caching allocator. Where memory goes is memtrace's model
// of PyTorch's (analysis/allocator_model: every rule, cited per release, where SIM_TORCH_MINOR
// picks the release); around it, as c10/cuda/CUDACachingAllocator.cpp (v2.6.0) has them:
//   - the device's lock around each call; OOM observers called outside it, then PyTorch's message;
//   - record_trace: the trackers run under the lock, before the history ring;
//   - snapshot(): each device's trace, then its segments, then a SNAPSHOT entry (device 0, address
//     0, the active bytes), which the next snapshot's trace begins with;
//   - NativeCachingAllocator::free: the pointer leaves the allocated blocks before its block goes
//     back to the device's pool.
// The Python stand-in (python/torch) calls the C functions of c_api.cpp, with the GIL released.
#include "caching_allocator.h"

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>

namespace c10 {

Allocator::~Allocator() = default;
void* Allocator::allocate_bytes(size_t) { return nullptr; }
void* Allocator::raw_deleter() const { return nullptr; }
void Allocator::copy_data(void* dest, const void* src, size_t count) const { std::memcpy(dest, src, count); }

namespace cuda::CUDACachingAllocator {

SIM_TORCH_API std::atomic<CUDAAllocator*> allocator{nullptr};

namespace Native {

namespace model = memtrace::torch_model;

namespace {

struct ParsedConfig {
  model::AllocConf conf;
  std::string error;
};
const ParsedConfig& parsed_config() {
  static const ParsedConfig c = [] {
    ParsedConfig c;
    const char* env = ::secure_getenv("PYTORCH_CUDA_ALLOC_CONF");
    if (auto conf = model::parse_alloc_conf(env ? env : "", c.error)) c.conf = *conf;
    return c;
  }();
  return c;
}

// c10/core/CachingDeviceAllocator.h format_size (v2.6.0).
std::string format_size(uint64_t size) {
  char text[64];
  if (size <= 1024)
    std::snprintf(text, sizeof text, "%llu bytes", static_cast<unsigned long long>(size));
  else if (size <= 1048576)
    std::snprintf(text, sizeof text, "%.2f KiB", size / 1024.0);
  else if (size <= 1073741824ull)
    std::snprintf(text, sizeof text, "%.2f MiB", size / 1048576.0);
  else
    std::snprintf(text, sizeof text, "%.2f GiB", size / 1073741824.0);
  return text;
}

uint64_t realtime_ns() {
  timespec t{};
  clock_gettime(CLOCK_REALTIME, &t);  // c10::getTime(): CLOCK_REALTIME
  return static_cast<uint64_t>(t.tv_sec) * 1000000000ull + static_cast<uint64_t>(t.tv_nsec);
}

// For the test of a TraceEntry memtrace reads wrong: segments reported off by some bytes.
uint64_t segment_skew() {
  static const uint64_t skew = [] {
    const char* s = ::secure_getenv("SIM_TORCH_SKEW_SEGMENTS");
    return s ? std::strtoull(s, nullptr, 10) : 0ull;
  }();
  return skew;
}

}  // namespace

const model::AllocConf& config() { return parsed_config().conf; }
const std::string& config_error() { return parsed_config().error; }

DeviceCachingAllocator::DeviceCachingAllocator(DeviceIndex device)
    : device_(device), memory_(cuda_memory(device, pool_allocators_)) {
  model::CachingAllocatorModel::Options options;
  options.conf = config();
  options.release = model::Release{SIM_TORCH_MINOR};
  model_ = std::make_unique<model::CachingAllocatorModel>(*memory_, options, this);
}
DeviceCachingAllocator::~DeviceCachingAllocator() = default;

void DeviceCachingAllocator::attach_tracker(AllocatorTraceTracker tracker) {
  std::lock_guard lock(mutex_);
  trackers_.push_back(std::move(tracker));
}

void DeviceCachingAllocator::attach_observer(OutOfMemoryObserver observer) {
  observers_.push_back(std::move(observer));
}

void DeviceCachingAllocator::record_history(bool enabled, int context_level, size_t max_entries) {
  std::lock_guard lock(mutex_);
  record_history_ = enabled;
  context_level_ = enabled ? context_level : 0;
  max_entries_ = max_entries ? max_entries : 1;
  if (!enabled) history_.clear();
}

void DeviceCachingAllocator::on_trace(model::Action action, uint64_t addr, uint64_t size, uint64_t stream,
                                      int64_t context, model::PoolId pool) {
  record_trace(static_cast<TraceEntry::Action>(action), addr, size, reinterpret_cast<void*>(stream), context,
               MempoolId_t{pool.first, pool.second});
}

void DeviceCachingAllocator::record_trace(TraceEntry::Action action, uint64_t addr, uint64_t size, void* stream,
                                          int64_t context, [[maybe_unused]] MempoolId_t pool,
                                          [[maybe_unused]] int device) {
  if (!record_history_ && trackers_.empty()) return;
  if (action == TraceEntry::SEGMENT_ALLOC || action == TraceEntry::SEGMENT_MAP) addr += segment_skew();
  TraceEntry e;
  e.action_ = action;
#if SIM_TORCH_MINOR >= 2
  e.device_ = static_cast<DeviceIndex>(device >= 0 ? device : device_);
  e.time_ = realtime_ns();  // PyTorch stores an approximate (TSC) time here, converted for snapshots
#endif
  e.addr_ = addr;
  e.stream_ = stream;
  e.size_ = size;
#if SIM_TORCH_MINOR >= 8
  // The pool of the block or segment the entry is about (record_trace's block->pool->owner_MempoolId(),
  // 2.8 on: PR #150683), {0, 0} for the default pool.
  e.mempool_ = pool;
  e.compile_context_ = "N/A";
#endif
  for (const auto& tracker : trackers_) tracker(e);
  if (record_history_) {
    history_.push_back(HistoryEntry{action, addr, size, reinterpret_cast<uint64_t>(stream), realtime_ns() / 1000,
                                    context_level_ >= 2 ? context : 0});
    if (history_.size() > max_entries_) history_.pop_front();
  }
}

uint64_t DeviceCachingAllocator::malloc(size_t orig_size, void* stream, int64_t context, std::string& error) {
  if (!config_error().empty()) {  // CUDAAllocatorConfig's check, thrown where the allocator first reads it
    error = config_error();
    return 0;
  }
  std::unique_lock lock(mutex_);
  model::OutOfMemory oom;
  uint64_t addr = model_->malloc(orig_size, reinterpret_cast<uint64_t>(stream), context, &oom);
  if (addr) return addr;
  std::vector<OutOfMemoryObserver> observers = observers_;
  const model::DeviceStats stats = model_->stats();
  lock.unlock();
  for (const auto& observer : observers) observer(device_, oom.alloc_size, oom.device_total, oom.device_free);
  const int64_t allocated = stats.allocated_bytes.all.current, reserved = stats.reserved_bytes.all.current;
  error = "CUDA out of memory. Tried to allocate " + format_size(oom.alloc_size) + ". GPU " + std::to_string(device_) +
          " has a total capacity of " + format_size(oom.device_total) + " of which " + format_size(oom.device_free) +
          " is free. Of the allocated memory " + format_size(allocated) + " is allocated by PyTorch, and " +
          format_size(reserved - allocated) +
          " is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
          "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
          "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)";
  return 0;
}

bool DeviceCachingAllocator::free(uint64_t addr, bool record_stream) {
  std::lock_guard lock(mutex_);
  return model_->free(addr, record_stream);
}

void DeviceCachingAllocator::empty_cache() {
  std::lock_guard lock(mutex_);
  model_->empty_cache();
}

DeviceStats DeviceCachingAllocator::stats() {
  std::lock_guard lock(mutex_);
  return model_->stats();
}

void DeviceCachingAllocator::reset_peak_stats() {
  std::lock_guard lock(mutex_);
  model_->reset_peak_stats();
}

void DeviceCachingAllocator::reset_accumulated_stats() {
  std::lock_guard lock(mutex_);
  model_->reset_accumulated_stats();
}

void DeviceCachingAllocator::begin_pool(MempoolId_t id, CUDAAllocator* pool_allocator) {
  std::lock_guard lock(mutex_);
  if (pool_allocator) pool_allocators_.emplace(id, pool_allocator);
  model_->begin_pool({id.first, id.second}, pool_allocator != nullptr);
}

void DeviceCachingAllocator::release_pool(MempoolId_t id) {
  std::lock_guard lock(mutex_);
  model_->release_pool({id.first, id.second});
}

void DeviceCachingAllocator::end_pool() {
  std::lock_guard lock(mutex_);
  model_->end_pool();
}

// This device's trace and segments, as THCPModule_memorySnapshot builds them
// (torch/csrc/cuda/Module.cpp): the trace read first, then the segments by address, then the
// SNAPSHOT entry (CCA's snapshot(): device 0, the active bytes). JSON, for the Python stand-in to
// turn into its dicts.
void DeviceCachingAllocator::snapshot(std::string& segments, std::string& trace) {
  std::lock_guard lock(mutex_);
  static const char* kActions[] = {"alloc",         "free_requested", "free_completed",
                                   "segment_alloc", "segment_free",   "segment_map",
                                   "segment_unmap", "snapshot",       "oom"};
  for (const HistoryEntry& h : history_) {
    char text[320];
    std::snprintf(text, sizeof text,
                  "%s{\"action\":\"%s\",\"%s\":%llu,\"size\":%llu,\"stream\":%llu,\"time_us\":%llu,"
                  "\"context\":%lld}",
                  trace.empty() ? "" : ",", kActions[h.action], h.action == TraceEntry::OOM ? "device_free" : "addr",
                  static_cast<unsigned long long>(h.addr), static_cast<unsigned long long>(h.size),
                  static_cast<unsigned long long>(h.stream), static_cast<unsigned long long>(h.time_us),
                  static_cast<long long>(h.context));
    trace += text;
  }
  auto state = [](const model::BlockView& b) {
    return b.allocated ? "active_allocated" : b.pending ? "active_pending_free" : "inactive";
  };
  uint64_t total_active = 0;
  for (const model::SegmentView& s : model_->segments()) {
    uint64_t allocated = 0, active = 0, requested = 0;
    std::string list;
    for (const model::BlockView& b : s.blocks) {
      if (b.allocated) allocated += b.size;
      if (b.allocated || b.pending) {
        active += b.size;
        requested += b.requested;
      }
      char text[256];
      std::snprintf(text, sizeof text,
                    "%s{\"address\":%llu,\"size\":%llu,\"requested_size\":%llu,\"state\":\"%s\",\"context\":%lld}",
                    list.empty() ? "" : ",", static_cast<unsigned long long>(b.addr),
                    static_cast<unsigned long long>(b.size), static_cast<unsigned long long>(b.requested), state(b),
                    static_cast<long long>(b.context));
      list += text;
    }
    total_active += active;
    char text[512];
    std::snprintf(text, sizeof text,
                  "{\"device\":%d,\"address\":%llu,\"total_size\":%llu,\"allocated_size\":%llu,"
                  "\"active_size\":%llu,\"requested_size\":%llu,\"stream\":%llu,\"segment_type\":\"%s\","
                  "\"segment_pool_id\":[%llu,%llu],\"is_expandable\":%s,\"context\":%lld,\"blocks\":[",
                  device_, static_cast<unsigned long long>(s.addr), static_cast<unsigned long long>(s.size),
                  static_cast<unsigned long long>(allocated), static_cast<unsigned long long>(active),
                  static_cast<unsigned long long>(requested), static_cast<unsigned long long>(s.stream),
                  s.small ? "small" : "large", static_cast<unsigned long long>(s.pool.first),
                  static_cast<unsigned long long>(s.pool.second), s.expandable ? "true" : "false",
                  static_cast<long long>(s.context));
    segments += (segments.empty() ? "" : ",") + std::string(text) + list + "]}";
  }
  record_trace(TraceEntry::SNAPSHOT, 0, total_active, nullptr, 0, MempoolId_t{0, 0}, /*device=*/0);
}

// As PyTorch's: the trackers and observers go to the device allocators that exist (init made them).
NativeCachingAllocator& NativeCachingAllocator::instance() {
  static auto* a = new NativeCachingAllocator();
  return *a;
}

uint64_t NativeCachingAllocator::malloc(size_t size, int device, void* stream, int64_t context, std::string& error) {
  if (device < 0 || static_cast<size_t>(device) >= devices.size()) {
    error = "invalid device ordinal";
    return 0;
  }
  uint64_t addr = devices[static_cast<size_t>(device)]->malloc(size, stream, context, error);
  if (addr) {
    std::lock_guard lock(owners_mutex_);
    owners_[addr] = device;
  }
  return addr;
}

// As PyTorch's NativeCachingAllocator::free (c10/cuda/CUDACachingAllocator.cpp, the same in every
// release the stand-in follows: read in 2.0's and in a 2.5-era copy, whose allocated_blocks are
// sharded by mutex): the pointer leaves the allocated blocks (get_allocated_block(ptr, true /*
// remove */)) before its block goes back to the device's pool, where another thread's malloc may
// take it at once; an unknown pointer is refused ("invalid device pointer").
bool NativeCachingAllocator::free(uint64_t addr, bool record_stream) {
  DeviceCachingAllocator* d = nullptr;
  {
    std::lock_guard lock(owners_mutex_);
    auto it = owners_.find(addr);
    if (it == owners_.end()) return false;
    d = devices[static_cast<size_t>(it->second)];
    owners_.erase(it);
  }
  return d->free(addr, record_stream);
}

void NativeCachingAllocator::init(int device_count) {
  while (devices.size() < static_cast<size_t>(device_count))
    devices.push_back(new DeviceCachingAllocator(static_cast<DeviceIndex>(devices.size())));
}
void NativeCachingAllocator::emptyCache() {
  for (auto* d : devices) d->empty_cache();
}
void NativeCachingAllocator::resetPeakStats(DeviceIndex device) {
  devices.at(static_cast<size_t>(device))->reset_peak_stats();
}
void NativeCachingAllocator::resetAccumulatedStats(DeviceIndex device) {
  devices.at(static_cast<size_t>(device))->reset_accumulated_stats();
}
void NativeCachingAllocator::recordHistory(bool enabled, size_t max_entries) {
  for (auto* d : devices) d->record_history(enabled, 2, max_entries);
}
void NativeCachingAllocator::attachOutOfMemoryObserver(OutOfMemoryObserver observer) {
  for (auto* d : devices) d->attach_observer(observer);
}
#if SIM_TORCH_MINOR >= 2
void NativeCachingAllocator::attachAllocatorTraceTracker(AllocatorTraceTracker tracker) {
  // For the test of a tracker that throws where memtrace calls it (SIM_TORCH_ATTACH_THROWS=1).
  if (const char* v = ::secure_getenv("SIM_TORCH_ATTACH_THROWS"); v && *v == '1')
    throw std::runtime_error("attachAllocatorTraceTracker refused (SIM_TORCH_ATTACH_THROWS)");
  for (auto* d : devices) d->attach_tracker(tracker);
}
#endif

// BackendStaticInitializer (CUDACachingAllocator.cpp, 2.2 to newest): at load time,
// PYTORCH_CUDA_ALLOC_CONF's backend (cudaMallocAsync) or the native allocator.
namespace {
__attribute__((constructor)) void backend_static_initializer() {
  CUDAAllocator* chosen = &NativeCachingAllocator::instance();
  if (config().backend == "cudaMallocAsync") chosen = async_allocator();
  allocator.store(chosen);
}
}  // namespace

}  // namespace Native
}  // namespace cuda::CUDACachingAllocator
}  // namespace c10
