// The replay behind `memtrace whatif`: one pass over the trace, every setting's replay of every
// device fed each request as it comes (memory grows with the live blocks, not the trace).
//
// What the run said is its truth: each allocation's requested size, stream and pool (the pool of
// the segment the run placed it in), each free as requested and as completed (record_stream: the
// block waits in between), empty_cache where the run released memory that no allocation asked
// for. What was live before the recording (a snapshot's state before its trace, an attach's
// PyTorch snapshot) is taken as it was under the run's own settings, and allocated again, in
// address order, under any other.
#include "memtrace/whatif/whatif.h"

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <unordered_map>

#include "memtrace/allocator_model/caching_allocator_model.h"
#include "memtrace/base/units.h"
#include "memtrace/engine/stacks.h"
#include "memtrace/engine/trace_set.h"
#include "memtrace/format/event.h"
#include "memtrace/format/torch_pool.h"

namespace memtrace::whatif {

namespace model = torch_model;

namespace {

constexpr uint64_t kPage = 2097152;

// A device's memory as the replay hands it out: bytes counted against a capacity, addresses
// from a range no recorded address reaches.
class ReplayMemory : public model::DeviceMemory {
 public:
  // CAPACITY: what may be reserved; none: no limit known.
  explicit ReplayMemory(std::optional<uint64_t> capacity) : capacity_(capacity) {}
  void adopt(uint64_t addr, uint64_t size) {
    used_ += size;
    next_ = std::max(next_, (addr + size + kPage - 1) / kPage * kPage);
  }
  uint64_t allocate(size_t bytes, model::PoolId) override {
    if (!fits(bytes)) return 0;
    used_ += bytes;
    return take(bytes);
  }
  void free(uint64_t, size_t bytes, model::PoolId) override { used_ -= std::min<uint64_t>(bytes, used_); }
  uint64_t reserve_range(size_t bytes) override { return take(bytes); }
  bool map(uint64_t, size_t bytes, size_t) override {
    if (!fits(bytes)) return false;
    used_ += bytes;
    return true;
  }
  void unmap(uint64_t, size_t bytes, size_t) override { used_ -= std::min<uint64_t>(bytes, used_); }
  void free_range(uint64_t, size_t) override {}
  size_t free_bytes() override { return total_bytes() - std::min<uint64_t>(used_, total_bytes()); }
  // With no capacity known, 1 TiB: what expandable segments size their address ranges by.
  size_t total_bytes() override { return capacity_ ? *capacity_ : uint64_t(1) << 40; }

 private:
  bool fits(uint64_t bytes) const { return !capacity_ || (bytes <= *capacity_ && used_ <= *capacity_ - bytes); }
  uint64_t take(uint64_t bytes) {
    uint64_t at = next_;
    next_ += (bytes + kPage - 1) / kPage * kPage;
    return at;
  }
  const std::optional<uint64_t> capacity_;
  uint64_t used_ = 0, next_ = uint64_t(1) << 44;
};

// One setting's replay of one device.
class DeviceReplay {
 public:
  DeviceReplay(const model::AllocConf& conf, model::Release release, bool adopt, std::optional<uint64_t> capacity,
               Prediction& out)
      : memory_(capacity), model_(memory_, options(conf, release)), adopt_(adopt), out_(out) {}

  void adopt_segment(uint64_t addr, uint64_t size, uint64_t stream, model::PoolId pool) {
    if (!adopt_ || !model_.adopt_segment(addr, size, stream, pool)) return;
    memory_.adopt(addr, size);
    note_peak();
  }
  void before_block(uint64_t addr, uint64_t size, uint64_t stream, model::PoolId pool) {
    if (adopt_ && model_.adopt_block(addr, size, stream, 0)) {
      map_[addr] = addr;
      note_peak();
      return;
    }
    waiting_.push_back({addr, size, stream, pool});
  }
  void alloc(uint64_t addr, uint64_t size, uint64_t stream, model::PoolId pool, uint64_t t_ns, uint64_t stack) {
    end_adoption();
    place_waiting();
    if (stopped_) return;
    // The run handed out an address the replay still holds: its free was not recorded (at an
    // attach, between PyTorch's snapshot and its tracker), so the block went before this.
    if (auto it = map_.find(addr); it != map_.end()) {
      if (!model_.free(it->second, false)) model_.complete_free(it->second);
      map_.erase(it);
    }
    uint64_t got = malloc(size, stream, pool);
    if (!got) {
      stopped_ = true;  // the program would have stopped here (or caught it: then the replay cannot follow)
      out_.oom = PredictedOom{t_ns, size, std::to_string(stack)};
      oom_stack_ = stack;
      return;
    }
    map_[addr] = got;
  }
  // BEFORE: a block freed before the recording, waiting for its streams then.
  void free_requested(uint64_t addr, bool before) {
    if (!before) {
      end_adoption();
      place_waiting();
    }
    auto it = map_.find(addr);
    if (it != map_.end() && !stopped_)
      model_.free(it->second, true);
    else if (before)
      freed_waiting_.push_back(addr);
  }
  void free_completed(uint64_t addr) {
    auto it = map_.find(addr);
    if (it == map_.end()) {  // one of those waiting to be placed anew: it goes as it is placed
      if (std::find(freed_waiting_.begin(), freed_waiting_.end(), addr) != freed_waiting_.end())
        completed_waiting_.push_back(addr);
      return;
    }
    if (!stopped_) model_.complete_free(it->second);
    map_.erase(it);
  }
  void empty_cache() {
    end_adoption();
    if (!stopped_) model_.empty_cache();
  }
  // RELEASED: the run's last request released memory no allocation asked for (empty_cache).
  void finish(bool released) {
    end_adoption();
    place_waiting();
    if (released) empty_cache();
    out_.segments_at_end = model_.segment_count();
  }
  void release_pool(model::PoolId pool) {
    if (!stopped_) model_.release_pool(pool);
  }
  uint64_t oom_stack() const { return oom_stack_; }

 private:
  struct Waiting {
    uint64_t addr, size, stream;
    model::PoolId pool;
  };
  static model::CachingAllocatorModel::Options options(const model::AllocConf& conf, model::Release release) {
    model::CachingAllocatorModel::Options o;
    o.conf = conf;
    o.release = release;
    o.streams_done_at_malloc = false;  // each free completes when the run says it did
    return o;
  }
  uint64_t malloc(uint64_t size, uint64_t stream, model::PoolId pool) {
    // A private pool is held from its first allocation until the run releases its memory (a CUDA
    // graph's, or a MemPool's, lives as long as they do): until then no empty_cache takes it.
    const bool pooled = pool != model::PoolId{0, 0};
    if (pooled) model_.begin_pool(pool, false);
    if (pooled && !pools_.insert(pool).second) model_.release_pool(pool);  // begin_pool took one more
    uint64_t got = model_.malloc(size, stream, 0, nullptr);
    if (pooled) model_.end_pool();
    note_peak();
    return got;
  }
  void end_adoption() {
    if (!adopting_) return;
    adopting_ = false;
    note_peak();
  }
  // The blocks live before the recording that the run's own state could not take, in address order.
  void place_waiting() {
    if (waiting_.empty()) return;
    std::vector<Waiting> w;
    w.swap(waiting_);
    adopting_ = true;  // weighed once placed, whole
    std::sort(w.begin(), w.end(), [](const Waiting& a, const Waiting& b) { return a.addr < b.addr; });
    for (const Waiting& b : w) {
      if (stopped_) return;
      uint64_t got = malloc(b.size, b.stream, b.pool);
      if (!got) {
        stopped_ = true;
        out_.oom = PredictedOom{0, b.size, "(live before the recording began)"};
        return;
      }
      map_[b.addr] = got;
      ++out_.placed_anew;
    }
    for (uint64_t addr : freed_waiting_)
      if (auto it = map_.find(addr); it != map_.end()) model_.free(it->second, true);
    for (uint64_t addr : completed_waiting_)
      if (auto it = map_.find(addr); it != map_.end()) {
        model_.complete_free(it->second);
        map_.erase(it);
      }
    freed_waiting_.clear();
    completed_waiting_.clear();
    end_adoption();
  }
  // The peak: the most reserved, and of the moments it stood, the one with the least free in it.
  void note_peak() {
    if (adopting_) return;  // the state before the recording is weighed once, whole
    const model::DeviceStats& s = model_.stats();
    const auto reserved = static_cast<uint64_t>(s.reserved_bytes.all.current);
    const uint64_t free = reserved - static_cast<uint64_t>(s.allocated_bytes.all.current);
    if (peak_seen_ && (reserved < out_.reserved_peak || (reserved == out_.reserved_peak && free >= out_.free_at_peak)))
      return;
    peak_seen_ = true;
    out_.reserved_peak = reserved;
    out_.segments_at_peak = model_.segment_count();  // as snapshots count them: runs of mapped pages
    out_.free_at_peak = free;
    out_.largest_free_at_peak = model_.largest_free_block();
  }

  ReplayMemory memory_;
  model::CachingAllocatorModel model_;
  const bool adopt_;
  Prediction& out_;
  std::unordered_map<uint64_t, uint64_t> map_;  // the run's block address -> the replay's
  std::set<model::PoolId> pools_;               // the private pools held
  std::vector<Waiting> waiting_;
  std::vector<uint64_t> freed_waiting_;      // of those, the ones freed before the recording
  std::vector<uint64_t> completed_waiting_;  // and of these, those whose free completed before they were placed
  bool stopped_ = false, peak_seen_ = false, adopting_ = true;
  uint64_t oom_stack_ = 0;
};

// What the run itself did on a device: its segments (the pool and stream each was made for), its
// reserved peak, and the replays of it.
struct DeviceRun {
  struct Range {
    uint64_t size = 0, stream = 0;
    model::PoolId pool{0, 0};
    bool expandable = false;
  };
  std::map<uint64_t, Range> ranges;
  uint64_t reserved = 0;
  bool released = false;  // the last request released memory: empty_cache, unless an allocation follows
  std::set<model::PoolId> released_pools;
  std::vector<std::unique_ptr<DeviceReplay>> replays;

  const Range* range_of(uint64_t addr) const {
    auto it = ranges.upper_bound(addr);
    if (it == ranges.begin()) return nullptr;
    --it;
    return addr - it->first < it->second.size ? &it->second : nullptr;
  }
  // Segments as PyTorch's snapshots count them: each cudaMalloc'd one, each run of mapped pages.
  uint64_t segments() const {
    uint64_t n = 0, end = 0;
    bool last_expandable = false;
    for (const auto& [addr, r] : ranges) {
      if (!(r.expandable && last_expandable && addr == end)) ++n;
      end = addr + r.size;
      last_expandable = r.expandable;
    }
    return n;
  }
};

model::PoolId pool_of(uint64_t key) {
  auto id = torch_pool_id(key);
  return {id.first, id.second};
}

// "2.11.0+cu130" -> 11; none for what names no 2.x release the model knows.
std::optional<int> minor_of(const std::string& release) {
  int major = 0, minor = 0;
  if (std::sscanf(release.c_str(), "%d.%d", &major, &minor) != 2 || major != 2 || minor < 0 || minor > 99)
    return std::nullopt;
  return minor;
}

// The traps reported of a setting, for the candidates' table.
std::vector<std::string> traps_of(const model::AllocConf& conf, const model::AllocConf& recorded) {
  std::vector<std::string> traps;
  if (conf.expandable_segments && !recorded.expandable_segments) {
    traps.push_back(
        "expandable segments with CUDA graphs and NCCL's buffers registered for the graph "
        "(pytorch/pytorch#158029, pytorch/torchtitan#3306)");
    traps.push_back(
        "expandable segments' memory cannot be shared with other processes by cudaIpc handles, as vLLM's "
        "custom all-reduce shares it (vllm-project/vllm#42609)");
  }
  if (conf.max_split_size != recorded.max_split_size && conf.max_split_size != SIZE_MAX)
    traps.push_back(
        "max_split_size_mb: blocks at or above it are never split, and an allocation that finds none frees "
        "cached ones first (pytorch/pytorch#193400)");
  if (conf.garbage_collection_threshold > 0)
    traps.push_back(
        "garbage_collection_threshold acts only once the program sets a memory fraction "
        "(torch.cuda.set_per_process_memory_fraction); the replay sets none");
  return traps;
}

}  // namespace

std::vector<std::string> candidate_confs(const std::string& recorded_conf) {
  std::string error;
  const model::AllocConf recorded = model::parse_alloc_conf(recorded_conf, error).value_or(model::AllocConf{});
  std::vector<std::string> out{recorded_conf};
  auto add = [&](auto change) {  // the run's own settings with one option changed
    model::AllocConf c = recorded;
    change(c);
    if (!(c == recorded)) out.push_back(c.text());
  };
  add([](model::AllocConf& c) { c.expandable_segments = !c.expandable_segments; });
  for (size_t mb : {128, 512, 2048}) add([mb](model::AllocConf& c) { c.max_split_size = mb << 20; });
  for (size_t d : {4, 8}) add([d](model::AllocConf& c) { c.roundup_power2_divisions.fill(d); });
  return out;
}

bool what_if(const std::string& path, const WhatIfOptions& options, ProcessWhatIf& out, std::string& error) {
  std::unique_ptr<TraceReader> reader = open_trace(path, error);
  if (!reader) return false;
  out = ProcessWhatIf{};
  out.path = path;

  model::Release release;
  if (options.release) {
    auto minor = minor_of(*options.release);
    if (!minor) {
      error = "--release " + *options.release + " names no PyTorch 2.x release (give it as 2.6)";
      return false;
    }
    release.minor = *minor;
    out.release = *options.release;
    out.release_known = true;
  }
  std::optional<model::AllocConf> one;
  if (options.alloc_conf) {
    one = model::parse_alloc_conf(*options.alloc_conf, error);
    if (!one) {
      error = "--alloc-conf: PyTorch would refuse it: " + error;
      return false;
    }
    if (one->backend != "native") {
      error = "--alloc-conf: backend:" + one->backend + " is not PyTorch's caching allocator: nothing to replay";
      return false;
    }
  }

  std::map<int32_t, uint64_t> totals;  // the devices' memory, known once the trace is read
  std::map<int32_t, DeviceRun> runs;
  std::map<int32_t, DeviceWhatIf> results;
  std::vector<std::string> confs;        // the settings replayed (set after the first pass)
  std::vector<model::AllocConf> parsed;  // the same, parsed
  std::vector<bool> adopts;              // whether each takes what was live before as it was
  model::AllocConf recorded_conf;
  bool any_before = false;             // blocks live before the recording: the run's own settings get a second row
  bool any_before_expandable = false;  // expandable segments then: placed anew under every setting

  // The settings replayed, once the first pass has read the run's own. False with ERROR set.
  auto start = [&]() {
    std::string why;
    if (out.conf_known) {
      auto conf = model::parse_alloc_conf(out.recorded_conf, why);
      if (!conf) {
        error = "the run's PYTORCH_CUDA_ALLOC_CONF=" + out.recorded_conf + " is not one memtrace's model reads (" +
                why + "): give the settings to replay with --alloc-conf";
        return false;
      }
      recorded_conf = *conf;
    }
    if (one)
      confs = {*options.alloc_conf};
    else if (!options.change.empty())
      confs = {out.recorded_conf.empty() ? options.change : out.recorded_conf + "," + options.change};
    else
      confs = candidate_confs(out.recorded_conf);
    for (const std::string& c : confs) {
      auto conf = model::parse_alloc_conf(c, why);
      parsed.push_back(conf.value_or(model::AllocConf{}));
      adopts.push_back(parsed.back() == recorded_conf && !any_before_expandable);
    }
    // The other settings place what was live before the recording anew, packed tighter than the
    // run's history left it: the run's own settings, placed so too, are what they compare with.
    if (!one && options.change.empty() && any_before && !any_before_expandable) {
      confs.push_back(out.recorded_conf);
      parsed.push_back(recorded_conf);
      adopts.push_back(false);
    }
    return true;
  };
  auto device_run = [&](int32_t device) -> DeviceRun& {
    auto [it, fresh] = runs.try_emplace(device);
    if (fresh) {
      DeviceWhatIf& r = results[device];
      r.device = device;
      r.device_total = options.capacity ? *options.capacity : totals.count(device) ? totals[device] : 0;
      r.predictions.resize(parsed.size());
      for (size_t i = 0; i < parsed.size(); ++i) {
        Prediction& p = r.predictions[i];
        p.alloc_conf = confs[i];
        p.as_recorded = parsed[i] == recorded_conf;
        p.adopted = adopts[i] || !any_before;  // nothing before: nothing placed otherwise
        p.traps = traps_of(parsed[i], recorded_conf);
      }
    }
    return it->second;
  };
  // First pass: the settings, the device's samples (what lay outside PyTorch's allocator at most,
  // which the replays' capacity leaves out), whether PyTorch's allocator was recorded at all.
  {
    std::map<int32_t, uint64_t> reserved;
    std::map<int32_t, uint64_t> outside;
    bool any_request = false;
    while (const Event* e = reader->next()) {
      if (e->api == Api::kTorchSetting) {
        std::string_view text = reader->string(e->name);
        size_t eq = text.find('=');
        if (eq == std::string_view::npos) continue;
        std::string key(text.substr(0, eq)), value(text.substr(eq + 1));
        if (key == "torch" && !options.release) {
          out.release = value;
          if (auto minor = minor_of(value)) {
            release.minor = *minor;
            out.release_known = true;
          }
        } else if (key == "PYTORCH_CUDA_ALLOC_CONF" || (key == "PYTORCH_ALLOC_CONF" && release.minor >= 9 &&
                                                        (!out.conf_known || out.recorded_conf.empty()))) {
          // PYTORCH_ALLOC_CONF, the newer name (read from 2.9-era main on), where the older one says nothing
          out.recorded_conf = value;
          out.conf_known = true;
        }
        continue;
      }
      if (!e->ok()) continue;
      if (e->api == Api::kTorchAlloc) {
        any_request = true;
        any_before = any_before || (e->flags & kEventBeforeRecording);
      }
      if (e->api == Api::kTorchSegmentMap && (e->flags & kEventBeforeRecording)) any_before_expandable = true;
      if (e->api == Api::kTorchSegmentAlloc || e->api == Api::kTorchSegmentMap) reserved[e->device] += e->size;
      if (e->api == Api::kTorchSegmentFree || e->api == Api::kTorchSegmentUnmap)
        reserved[e->device] -= std::min(reserved[e->device], e->size);
      if (e->api == Api::kDeviceUsed && e->size > reserved[e->device])
        outside[e->device] = std::max(outside[e->device], e->size - reserved[e->device]);
    }
    if (reader->corrupt()) {
      error = reader->problem();
      return false;
    }
    for (const auto& d : reader->header().devices()) totals[d.ordinal()] = d.total_bytes();
    if (!any_request) {
      error = path +
              " holds no request to PyTorch's caching allocator (no allocated layer was recorded): there is "
              "nothing to replay";
      return false;
    }
    if (!start()) return false;
    for (auto& [device, bytes] : outside) results[device].outside_most = bytes;
  }

  reader = open_trace(path, error);
  if (!reader) return false;
  StackView stacks(*reader, false);
  auto replays_of = [&](int32_t device) -> DeviceRun& {
    DeviceRun& run = device_run(device);
    if (run.replays.empty()) {
      DeviceWhatIf& r = results[device];
      std::optional<uint64_t> capacity;  // none known: no limit
      if (r.device_total) capacity = r.device_total > r.outside_most ? r.device_total - r.outside_most : 0;
      r.capacity = capacity.value_or(0);
      r.capacity_known = capacity.has_value();
      for (size_t i = 0; i < parsed.size(); ++i)
        run.replays.push_back(
            std::make_unique<DeviceReplay>(parsed[i], release, adopts[i], capacity, r.predictions[i]));
    }
    return run;
  };
  auto note_recorded_peak = [&](int32_t device, DeviceRun& run) {
    DeviceWhatIf& r = results[device];
    if (run.reserved > r.reserved_peak || !r.segments_at_peak) {
      r.reserved_peak = std::max(r.reserved_peak, run.reserved);
      r.segments_at_peak = run.segments();
    }
  };

  while (const Event* e = reader->next()) {
    if (!from_pytorch(e->api) || e->api == Api::kTorchCategory) continue;
    DeviceRun& run = replays_of(e->device);
    const bool before = e->flags & kEventBeforeRecording;
    const bool releases = e->api == Api::kTorchSegmentFree || e->api == Api::kTorchSegmentUnmap;
    const bool reserves = e->api == Api::kTorchSegmentAlloc || e->api == Api::kTorchSegmentMap;
    // Memory the run released that no allocation asked for: empty_cache (PyTorch's own releases,
    // on running out or past max_split_size, come right before the segment they make room for).
    if (run.released && !releases && !reserves)
      for (auto& replay : run.replays) replay->empty_cache();
    run.released = releases;
    if (!e->ok() && e->api != Api::kTorchOom) continue;
    switch (e->api) {
      case Api::kTorchSegmentAlloc:
      case Api::kTorchSegmentMap: {
        DeviceRun::Range r{e->size, e->stream, pool_of(e->handle), e->api == Api::kTorchSegmentMap};
        run.ranges[e->addr] = r;
        run.reserved += e->size;
        if (before && !r.expandable)
          for (auto& replay : run.replays) replay->adopt_segment(e->addr, e->size, e->stream, r.pool);
        note_recorded_peak(e->device, run);
        break;
      }
      case Api::kTorchSegmentFree:
      case Api::kTorchSegmentUnmap: {
        // An unmap may cover part of a mapping, or several: cut by overlap.
        uint64_t end = e->addr + e->size;
        auto it = run.ranges.upper_bound(e->addr);
        if (it != run.ranges.begin()) --it;
        while (it != run.ranges.end() && it->first < end) {
          uint64_t base = it->first, range_end = base + it->second.size;
          if (range_end <= e->addr) {
            ++it;
            continue;
          }
          DeviceRun::Range r = it->second;
          it = run.ranges.erase(it);
          if (r.pool != model::PoolId{0, 0} && run.released_pools.insert(r.pool).second)
            for (auto& replay : run.replays) replay->release_pool(r.pool);  // the run let the pool go
          run.reserved -= std::min(run.reserved, std::min(range_end, end) - std::max(base, e->addr));
          if (base < e->addr) run.ranges[base] = DeviceRun::Range{e->addr - base, r.stream, r.pool, r.expandable};
          if (range_end > end)
            it = run.ranges.emplace(end, DeviceRun::Range{range_end - end, r.stream, r.pool, r.expandable}).first;
        }
        break;
      }
      case Api::kTorchAlloc: {
        const DeviceRun::Range* r = run.range_of(e->addr);
        const model::PoolId pool = r ? r->pool : model::PoolId{0, 0};
        // A snapshot's blocks live at its start carry no stream: theirs is their segment's.
        const uint64_t stream = before && r ? r->stream : e->stream;
        for (auto& replay : run.replays) {
          if (before)
            replay->before_block(e->addr, e->size, stream, pool);
          else
            replay->alloc(e->addr, e->size, stream, pool, e->t_ns, e->stack_id);
        }
        if (!before) ++results[e->device].requests;
        break;
      }
      case Api::kTorchFree:
        for (auto& replay : run.replays) replay->free_requested(e->addr, before);
        break;
      case Api::kTorchFreeCompleted:
        for (auto& replay : run.replays) replay->free_completed(e->addr);
        break;
      case Api::kTorchOom: ++results[e->device].recorded_ooms; break;
      default: break;
    }
  }
  if (reader->corrupt()) {
    error = reader->problem();
    return false;
  }
  for (auto& [device, run] : runs) {
    DeviceWhatIf& r = results[device];
    r.segments_at_end = run.segments();
    for (size_t i = 0; i < run.replays.size(); ++i) {
      run.replays[i]->finish(run.released);
      Prediction& p = r.predictions[i];
      if (p.oom && run.replays[i]->oom_stack()) {
        std::optional<FrameView> site = stacks.site_frame(run.replays[i]->oom_stack(), SiteGrouping::kUser);
        std::vector<FrameView> frames = stacks.frames(run.replays[i]->oom_stack());
        p.oom->line = site ? frame_label(*site) : frames.empty() ? "(no stack)" : frame_label(first_said(frames));
      } else if (p.oom && p.oom->t_ns) {
        p.oom->line = "(no stack)";
      }
    }
    out.devices.push_back(std::move(r));
  }
  return true;
}

std::string expandable_segments_prediction(const std::string& trace_path) {
  WhatIfOptions options;
  options.change = "expandable_segments:True";
  ProcessWhatIf p;
  std::string error;
  if (!what_if(trace_path, options, p, error)) return {};
  std::string out;
  for (const DeviceWhatIf& d : p.devices) {
    if (d.predictions.empty() || d.predictions.front().as_recorded) return {};  // on already
    const Prediction& q = d.predictions.front();
    out += (out.empty() ? "memtrace whatif predicts" : ";") + std::string(" device ") + std::to_string(d.device) +
           " at " + format_bytes(q.reserved_peak) + " reserved at its peak with it (" + format_bytes(d.reserved_peak) +
           " in this run)" + (q.oom ? ", running out of memory" : "");
  }
  return out.empty() ? out : out + ".";
}

}  // namespace memtrace::whatif
