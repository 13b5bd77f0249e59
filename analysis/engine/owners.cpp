#include "memtrace/engine/owners.h"

#include <algorithm>
#include <filesystem>

#include "memtrace/base/units.h"
#include "memtrace/engine/report.h"
#include "memtrace/format/torch_pool.h"

namespace memtrace {

const char* owner_kind_name(OwnerKind kind) {
  switch (kind) {
    case OwnerKind::kProgram: return "program";
    case OwnerKind::kLibrary: return "library";
    case OwnerKind::kPyTorch: return "pytorch";
    case OwnerKind::kPyTorchTensors: return "pytorch_tensors";
    case OwnerKind::kPyTorchCache: return "pytorch_cache";
    case OwnerKind::kPyTorchPool: return "pytorch_pool";
    case OwnerKind::kGraphs: return "graphs";
    case OwnerKind::kPools: return "pools";
    case OwnerKind::kOtherProcesses: return "other_processes";
    case OwnerKind::kContext: return "context";
    case OwnerKind::kUnexplained: return "unexplained";
    case OwnerKind::kUnplaced: break;
  }
  return "unplaced";
}

namespace {

constexpr const char* kProgram = "the program";
constexpr const char* kPyTorch = "PyTorch's allocator";

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// A library by its file name: NVIDIA's by their product names, the rest as "libfoo".
Owner library_named(const std::string& module) {
  const std::string file = std::filesystem::path(module).filename().string();
  static const std::pair<const char*, const char*> kKnown[] = {
      {"libnccl", "NCCL"},       {"libcublasLt", "cuBLASLt"}, {"libcublas", "cuBLAS"},     {"libcudnn", "cuDNN"},
      {"libcufft", "cuFFT"},     {"libcusparse", "cuSPARSE"}, {"libcusolver", "cuSOLVER"}, {"libcurand", "cuRAND"},
      {"libnvshmem", "NVSHMEM"}, {"libnvrtc", "NVRTC"},
  };
  for (const auto& [prefix, name] : kKnown)
    if (starts_with(file, prefix)) return {OwnerKind::kLibrary, name, ""};
  // PyTorch's C++ (its caching allocator lives in libc10_cuda; libtorch_cuda calls CUDA too).
  if (starts_with(file, "libc10") || starts_with(file, "libtorch")) return {OwnerKind::kPyTorch, kPyTorch, ""};
  const size_t so = file.find(".so");
  if (so == std::string::npos) return {OwnerKind::kProgram, kProgram, ""};  // an executable: the program
  return {OwnerKind::kLibrary, file.substr(0, so), ""};
}

// A frame with no module (a PyTorch snapshot's C++ frames): PyTorch's by its namespaces.
bool pytorch_function(const std::string& function) {
  for (const char* prefix : {"c10::", "at::", "torch::", "void c10::", "void at::"})
    if (starts_with(function, prefix)) return true;
  return false;
}

}  // namespace

Owner owner_of(const std::vector<FrameView>& stack) {
  size_t k = 0;
  while (k < stack.size() && StackView::is_library_frame(stack[k])) ++k;
  if (k == stack.size()) return {OwnerKind::kUnplaced, "", ""};
  const FrameView& f = stack[k];
  // Python code calling CUDA (through ctypes, through the interpreter's frames) is the program.
  if (f.python || is_interpreter_frame(f)) return {OwnerKind::kProgram, kProgram, ""};
  if (f.module.empty()) {
    if (pytorch_function(f.function)) return {OwnerKind::kPyTorch, kPyTorch, ""};
    return {OwnerKind::kUnplaced, "", ""};
  }
  Owner owner = library_named(f.module);
  if (owner.kind != OwnerKind::kLibrary) return owner;
  // The call into the library: its outermost frame of that module, and who called it.
  size_t entry = k;
  while (entry + 1 < stack.size() && !stack[entry + 1].python && stack[entry + 1].module == f.module) ++entry;
  owner.part = with_caller(stack, entry);
  return owner;
}

std::string owner_label(const std::vector<FrameView>& stack) {
  Owner o = owner_of(stack);
  if (o.kind == OwnerKind::kUnplaced) return "not placed (no module in its stack)";
  return o.part.empty() ? o.name : o.name + ": " + o.part;
}

uint32_t OwnerTracker::slot_of(uint64_t stack_id) {
  auto [it, fresh] = by_stack_.try_emplace(stack_id, 0);
  if (fresh) {
    Owner owner = owner_of(stacks_.all_frames(stack_id));
    if (all_pytorch_) owner = {OwnerKind::kPyTorch, kPyTorch, ""};  // a segment's stack or none: PyTorch's
    it->second = slot_of(std::move(owner));
  }
  return it->second;
}

uint32_t OwnerTracker::slot_of(Owner owner) {
  std::string key = std::string(owner_kind_name(owner.kind)) + '\0' + owner.name + '\0' + owner.part;
  auto [slot, made] = slots_.try_emplace(std::move(key), static_cast<uint32_t>(owners_.size()));
  if (made) {
    const std::string name = owner.kind == OwnerKind::kUnplaced ? "not placed" : owner.name;
    auto known = std::find(names_.begin(), names_.end(), name);
    name_of_slot_.push_back(static_cast<uint32_t>(known - names_.begin()));
    if (known == names_.end()) names_.push_back(name);
    owners_.push_back(std::move(owner));
  }
  return slot->second;
}

void OwnerTracker::on_event(const Event& event, const ReplayStep& step, const Replay&) {
  if (event.api == Api::kDeviceUsed) {
    if (event.device < 0) return;
    DeviceState& d = devices_[event.device];
    if (!d.sampled) {
      d.sampled = true;
      d.outside_at_first_sample = event.size > d.live ? event.size - d.live : 0;
    }
    return;
  }
  if (OutsideParts().part(event.api)) {  // read with the device.used that follows
    DeviceState& d = devices_[event.device];
    *d.parts.part(event.api) = event.size;
    if (event.api == Api::kDeviceOtherProcesses) d.parts.other_processes_known = true;
    return;
  }
  // An out of memory, as ReportBuilder lists them: who held the device then, by the figures the
  // failed call reported.
  if (!event.interrupted() && !is_observation(event.api) && event.op() == Op::kAlloc &&
      event.result == kOutOfMemoryResult) {
    DeviceState& d = devices_[event.device];
    const uint64_t used = event.device_total > event.device_free ? event.device_total - event.device_free : 0;
    ooms_.push_back({d.slots, d.allocated_live,
                     DeviceLayer{used > 0, used > d.live ? used - d.live : 0, d.parts, d.outside_at_first_sample,
                                 "the allocated layer at the failed call"},
                     d.pools});
  }
  if (event.api == Api::kTorchSegmentAlloc || event.api == Api::kTorchSegmentMap ||
      event.api == Api::kTorchSegmentFree || event.api == Api::kTorchSegmentUnmap)
    on_pool_segment(event);
  for (const MemoryChange& change : step.memory_changes) {
    DeviceState& d = devices_[change.device];
    if (change.layer == Layer::kAllocated) {
      d.allocated_live += static_cast<uint64_t>(change.bytes);
      // A tensor in a private pool's segment: its pool known at its arrival, counted down by it
      // when it goes (its segment may be gone by then).
      if (change.arrived && !pool_segments_.empty()) {
        auto seg = pool_segments_.upper_bound(change.addr);
        if (seg != pool_segments_.begin() && change.addr - (--seg)->first < seg->second.first) {
          d.pools[seg->second.second].allocated += static_cast<uint64_t>(change.bytes);
          pool_tensors_[change.addr] = seg->second.second;
        }
      } else if (!change.arrived && !pool_tensors_.empty()) {
        if (auto t = pool_tensors_.find(change.addr); t != pool_tensors_.end()) {
          PoolLive& pool = d.pools[t->second];
          pool.allocated -= std::min(pool.allocated, static_cast<uint64_t>(-change.bytes));
          pool_tensors_.erase(t);
        }
      }
      // The tensors that made the peak arrive after the segment they came for: the allocated
      // layer's most while the reserved peak stands.
      if (d.standing && d.allocated_live > d.allocated_at_peak) {
        d.allocated_at_peak = d.allocated_live;
        d.keep_pools_while_standing();
      }
      continue;
    }
    if (change.layer != Layer::kReserved) continue;
    if (!change.arrived && d.peak_unsaved) {  // as ReportBuilder: copied at the first decrease after a peak
      d.at_peak = d.slots;
      d.peak_unsaved = false;
    }
    // What was live before recording began is what PyTorch's snapshot listed (the Python shim's
    // memtrace_existing, under memtrace attach or memtrace.record): PyTorch's segments.
    const uint32_t slot = event.flags & kEventBeforeRecording ? slot_of(Owner{OwnerKind::kPyTorch, kPyTorch, ""})
                                                              : slot_of(change.site.stack_id);
    if (owners_[slot].kind == OwnerKind::kPyTorch) {
      if (change.arrived)
        pytorch_reserved_.insert(change.addr);
      else
        pytorch_reserved_.erase(change.addr);
    }
    if (d.slots.size() <= slot) d.slots.resize(slot + 1);
    d.slots[slot].bytes += static_cast<uint64_t>(change.bytes);
    if (change.arrived)
      ++d.slots[slot].count;
    else
      --d.slots[slot].count;
    d.live += static_cast<uint64_t>(change.bytes);
    if (timeline_) {
      const uint32_t name = name_of_slot_[slot];
      if (d.by_name.size() <= name) d.by_name.resize(name + 1);
      if (timelines_.size() <= name) timelines_.resize(name + 1);
      d.by_name[name] += static_cast<uint64_t>(change.bytes);
      timelines_[name].record(change.device, Layer::kReserved, event.t_ns, d.by_name[name]);
    }
    if (d.live > d.peak) {
      d.peak = d.live;
      d.peak_unsaved = true;
      d.standing = true;
      d.allocated_at_peak = d.allocated_live;
      d.keep_pools_while_standing();
    } else if (!change.arrived && change.bytes) {
      d.standing = false;
    }
  }
}

// A segment of PyTorch's made for a private pool (its handle), or one that went.
void OwnerTracker::on_pool_segment(const Event& event) {
  if (!event.ok()) return;
  if (event.op() == Op::kAlloc) {
    if (!event.handle) return;
    DeviceState& d = devices_[event.device];
    PoolLive& pool = d.pools[event.handle];
    pool.reserved += event.size;
    // A pool whose segments PyTorch did not reserve itself got them from an allocator of its own
    // (a MemPool's: ncclMemAlloc, an arena), whose owner holds the bytes. Expandable segments'
    // pages are PyTorch's own (no pool with an allocator of its own uses them).
    if (event.api == Api::kTorchSegmentAlloc && !all_pytorch_ && !pytorch_reserved_.count(event.addr)) pool.own = false;
    pool_segments_[event.addr] = {event.size, event.handle};
    d.keep_pools_while_standing();
    return;
  }
  if (pool_segments_.empty()) return;
  // A segment freed (the whole of it), or pages unmapped: cut out of the ranges they overlap, as
  // Replay::unmap_heap cuts its heaps (PyTorch unmaps the free pages of an earlier mapping).
  uint64_t end = event.addr + event.size;
  if (event.api == Api::kTorchSegmentFree) {
    auto whole = pool_segments_.find(event.addr);
    if (whole == pool_segments_.end()) return;
    end = event.addr + whole->second.first;
  }
  auto it = pool_segments_.upper_bound(event.addr);
  if (it != pool_segments_.begin() && std::prev(it)->first + std::prev(it)->second.first > event.addr) --it;
  while (it != pool_segments_.end() && it->first < end) {
    const uint64_t base = it->first, size = it->second.first, key = it->second.second;
    const uint64_t cut_from = std::max(base, event.addr), cut_to = std::min(base + size, end);
    PoolLive& pool = devices_[event.device].pools[key];
    pool.reserved -= std::min(pool.reserved, cut_to - cut_from);
    it = pool_segments_.erase(it);
    if (base < cut_from) pool_segments_[base] = {cut_from - base, key};
    if (cut_to < base + size) it = pool_segments_.emplace(cut_to, std::make_pair(base + size - cut_to, key)).first;
  }
  devices_[event.device].keep_pools_while_standing();
}

void OwnerTracker::finish(uint64_t end_ns) {
  for (auto& [device, d] : devices_)
    if (d.peak_unsaved) {
      d.at_peak = d.slots;
      d.peak_unsaved = false;
    }
  for (size_t name = 0; name < timelines_.size(); ++name)
    for (TimelineSeries& s : timelines_[name].series(end_ns)) series_.push_back({names_[name], std::move(s)});
  auto most = [](const OwnerSeries& o) {
    uint64_t m = 0;
    for (const TimelinePoint& p : o.series.points) m = std::max(m, p.max_bytes);
    return m;
  };
  std::stable_sort(series_.begin(), series_.end(), [&](const OwnerSeries& a, const OwnerSeries& b) {
    return a.series.device != b.series.device ? a.series.device < b.series.device : most(a) > most(b);
  });
}

std::vector<OwnerShare> OwnerTracker::rows(const std::vector<Live>& live_slots, uint64_t allocated, const Pools& pools,
                                           bool pytorch, const DeviceLayer& layer) const {
  std::vector<OwnerShare> rows;
  // The reserved layer by owner, a library's parts beneath it.
  auto row_of = [&](const Owner& o) -> OwnerShare& {
    for (OwnerShare& r : rows)
      if (r.kind == o.kind && r.owner == o.name) return r;
    OwnerShare r;
    r.kind = o.kind;
    r.owner = o.name;
    if (o.kind == OwnerKind::kUnplaced) {
      r.owner = "not placed";
      r.why = "reserved by calls whose stacks name no module (no stack was recorded, or an older memtrace)";
    }
    rows.push_back(std::move(r));
    return rows.back();
  };
  for (size_t slot = 0; slot < live_slots.size(); ++slot) {
    const Live& live = live_slots[slot];
    if (!live.bytes) continue;
    const Owner& o = owners_[slot];
    OwnerShare& r = row_of(o);
    r.bytes += live.bytes;
    r.count += live.count;
    if (!o.part.empty()) r.parts.push_back({o.part, live.bytes, live.count});
  }
  // PyTorch's segments: its tensors, and its cache (reserved less allocated).
  if (pytorch) {
    auto torch =
        std::find_if(rows.begin(), rows.end(), [](const OwnerShare& r) { return r.kind == OwnerKind::kPyTorch; });
    if (torch != rows.end()) {
      uint64_t reserved = torch->bytes;
      const uint64_t count = torch->count;
      rows.erase(torch);
      // Its private pools first: CUDA graphs' and MemPools', each with its tensors.
      for (const auto& [key, pool] : pools) {
        const uint64_t in_pool = std::min(pool.allocated, allocated);
        allocated -= in_pool;  // a foreign pool's tensors lie in another owner's memory
        if (!pool.own || !pool.reserved) continue;
        const uint64_t bytes = std::min(pool.reserved, reserved);
        const uint64_t tensors = std::min(in_pool, bytes);
        reserved -= bytes;
        OwnerShare r{OwnerKind::kPyTorchPool, "PyTorch's " + torch_pool_name(key), bytes, 0, {}, "", tensors};
        r.why = std::string(torch_pool_kind(key)) + ": " + format_bytes(tensors) + " its tensors', " +
                format_bytes(bytes - tensors) + " cached";
        rows.push_back(std::move(r));
      }
      const uint64_t tensors = std::min(allocated, reserved);
      rows.push_back({OwnerKind::kPyTorchTensors, "PyTorch's tensors", tensors, 0, {}, layer.tensors_why});
      rows.push_back({OwnerKind::kPyTorchCache,
                      "PyTorch's cache",
                      reserved - tensors,
                      count,
                      {},
                      "its segments less its tensors: free cached blocks, rounding, fragments"});
    }
  }
  // The device layer: what lay outside the reserved layer.
  if (layer.sampled) {
    const OutsideParts parts = layer.parts.within(layer.outside);
    auto add = [&](OwnerKind kind, const char* owner, uint64_t bytes, std::string why) {
      if (bytes) rows.push_back({kind, owner, bytes, 0, {}, std::move(why)});
    };
    add(OwnerKind::kGraphs, "CUDA graphs", parts.graphs_reserved, "reserved for their memory nodes");
    add(OwnerKind::kPools, "stream-ordered pools", parts.pools_held, "kept beyond their allocations");
    add(OwnerKind::kOtherProcesses, "other processes", parts.other_processes, "on the device, by NVML");
    const uint64_t rest = layer.outside - parts.total();
    const uint64_t context = std::min(layer.context, rest);
    add(OwnerKind::kContext, "the CUDA context", context,
        "with its loaded modules, as the device's first sample found it");
    add(OwnerKind::kUnexplained, "not explained", rest - context,
        parts.other_processes_known
            ? "held beyond the context since: modules loaded later, library workspaces no allocation API made"
            : "held beyond the context since: modules loaded later, library workspaces no allocation API made, "
              "other processes (NVML did not say)");
  }
  for (OwnerShare& r : rows)
    std::sort(r.parts.begin(), r.parts.end(), [](const OwnerPart& a, const OwnerPart& b) {
      return a.bytes != b.bytes ? a.bytes > b.bytes : a.name < b.name;
    });
  std::stable_sort(rows.begin(), rows.end(),
                   [](const OwnerShare& a, const OwnerShare& b) { return a.bytes > b.bytes; });
  return rows;
}

std::vector<OwnerShare> OwnerTracker::at_peak(const DeviceReport& device, bool pytorch) const {
  auto it = devices_.find(device.device);
  if (it == devices_.end()) return {};
  const DeviceState& d = it->second;
  DeviceLayer layer{device.device_samples > 0, device.outside_reserved_at_peak_bytes, device.outside_parts_at_peak,
                    d.outside_at_first_sample, "the allocated layer at its most while the peak stood"};
  return rows(d.at_peak, d.allocated_at_peak, d.pools_at_peak, pytorch, layer);
}

std::vector<std::vector<OwnerShare>> OwnerTracker::at_ooms(bool pytorch) const {
  std::vector<std::vector<OwnerShare>> out;
  for (const OomMoment& m : ooms_) out.push_back(rows(m.slots, m.allocated, m.pools, pytorch, m.layer));
  return out;
}

}  // namespace memtrace
