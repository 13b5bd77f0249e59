#include "memtrace/exports/export_memory_viz.h"

#include <charconv>
#include <deque>
#include <map>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "memtrace/engine/categories.h"
#include "memtrace/engine/pass.h"
#include "memtrace/engine/phases.h"
#include "memtrace/engine/stacks.h"
#include "memtrace/engine/trace_set.h"
#include "memtrace/format/torch_action.h"
#include "memtrace/format/torch_pool.h"
#include "memtrace/importers/pickle.h"

namespace memtrace {

namespace {

// What the document is written through: a pickle, or JSON of the same shape.
class Sink {
 public:
  virtual ~Sink() = default;
  virtual void begin_dict() = 0;
  virtual void end_dict() = 0;
  virtual void begin_list() = 0;
  virtual void end_list() = 0;
  virtual void key(std::string_view k) = 0;
  virtual void str(std::string_view v) = 0;
  virtual void integer(int64_t v) = 0;
  virtual void boolean(bool v) = 0;
  virtual void pair(int64_t a, int64_t b) = 0;  // a tuple of two
  // Writes the value kept under KEY and returns true, or returns false: then write it and keep it.
  virtual bool recall(uint64_t key) = 0;
  virtual void keep(uint64_t key) = 0;
  virtual std::string finish() = 0;
};

class PickleSink : public Sink {
 public:
  void begin_dict() override { w_.begin_dict(); }
  void end_dict() override { w_.end_dict(); }
  void begin_list() override { w_.begin_list(); }
  void end_list() override { w_.end_list(); }
  void key(std::string_view k) override { w_.str(k); }
  void str(std::string_view v) override { w_.str(v); }
  void integer(int64_t v) override { w_.integer(v); }
  void boolean(bool v) override { w_.boolean(v); }
  void pair(int64_t a, int64_t b) override { w_.tuple2(a, b); }
  bool recall(uint64_t key) override { return w_.recall(key); }
  void keep(uint64_t key) override { w_.memoize(key); }
  std::string finish() override { return w_.finish(); }

 private:
  pickle::Writer w_;
};

class JsonSink : public Sink {
 public:
  void begin_dict() override { open('{'); }
  void end_dict() override { close('}'); }
  void begin_list() override { open('['); }
  void end_list() override { close(']'); }
  void key(std::string_view k) override {
    str(k);
    out_ += ':';
    after_key_ = true;
  }
  void str(std::string_view v) override {
    separate();
    out_ += '"';
    for (char c : v) {
      auto u = static_cast<unsigned char>(c);
      if (c == '"' || c == '\\') {
        out_ += '\\';
        out_ += c;
      } else if (u < 0x20) {
        static const char kHex[] = "0123456789abcdef";
        out_ += "\\u00";
        out_ += kHex[u >> 4];
        out_ += kHex[u & 15];
      } else {
        out_ += c;
      }
    }
    out_ += '"';
  }
  void integer(int64_t v) override {
    separate();
    char text[24];
    auto [end, ec] = std::to_chars(text, text + sizeof text, v);
    out_.append(text, end);
  }
  void boolean(bool v) override {
    separate();
    out_ += v ? "true" : "false";
  }
  void pair(int64_t a, int64_t b) override {
    begin_list();
    integer(a);
    integer(b);
    end_list();
  }
  bool recall(uint64_t key) override {
    auto it = kept_.find(key);
    if (it == kept_.end()) {
      recording_.push_back({key, out_.size()});
      return false;
    }
    separate();
    out_ += it->second;
    return true;
  }
  void keep(uint64_t key) override {
    if (recording_.empty() || recording_.back().first != key) return;
    size_t from = recording_.back().second;
    recording_.pop_back();
    std::string value = out_.substr(from);
    if (!value.empty() && value.front() == ',') value.erase(0, 1);
    kept_.emplace(key, std::move(value));
  }
  std::string finish() override { return std::move(out_); }

 private:
  void separate() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    if (!first_.empty()) {
      if (!first_.back()) out_ += ',';
      first_.back() = false;
    }
  }
  void open(char c) {
    separate();
    out_ += c;
    first_.push_back(true);
  }
  void close(char c) {
    out_ += c;
    first_.pop_back();
  }
  std::string out_;
  std::vector<bool> first_;  // per open container: nothing written in it yet
  bool after_key_ = false;
  std::unordered_map<uint64_t, std::string> kept_;
  std::vector<std::pair<uint64_t, size_t>> recording_;
};

using Action = TorchAction;  // named as PyTorch's snapshots name them

constexpr uint64_t kNoAllocation = UINT64_MAX;

struct Entry {
  Action action;
  uint64_t addr, size, stream, t_ns, stack_id;
  uint64_t allocation = kNoAllocation;  // an alloc's number, for its category
};

struct Segment {
  uint64_t stack_id = 0, stream = 0;
  bool expandable = false;
  uint64_t pool = 0;  // torch_pool_key of the private pool it was made for
};

class MemoryVizExport : public PassWithBefore {
 public:
  MemoryVizExport(TraceReader& reader, const MemoryVizOptions& options)
      : reader_(reader),
        options_(options),
        stacks_(reader, options.keep_cuda_frames),
        phases_(reader, kDefaultStepPattern),
        categories_(/*keep_all=*/true) {}

  // Reads the trace: as PyTorch's allocator described it (ALLOCATED_LAYER), or as the reserved
  // layer's allocations otherwise.
  void read(bool allocated_layer) {
    allocated_ = allocated_layer;
    driver_.add(*this).run(reader_);
    categories_.finish();
  }

  // Heaps are known before the replay forgets them; what they are after it has merged them.
  void before(const Event& e, const Replay& replay) override {
    heap_size_ = 0;
    if (e.kind == MemKind::kHeap && e.op() == Op::kFree)
      if (auto h = replay.heaps().find(e.addr); h != replay.heaps().end()) heap_size_ = h->second.size;
  }

  void on_event(const Event& e, const ReplayStep& step, const Replay& replay) override {
    phases_.add(e);
    last_t_ns_ = std::max(last_t_ns_, e.t_ns);
    if (allocated_) {
      bool named = api_info(e.api).aux == AuxField::kName;
      categories_.add(e, step, replay, phases_.step_starts().size(), named ? reader_.string(e.name) : "");
      allocated_event(e, step, heap_size_);
    } else {
      reserved_event(e, step);
    }
  }

  std::string write(Sink& out, std::vector<std::string>& warnings) {
    out.begin_dict();
    out.key("segments");
    out.begin_list();
    if (allocated_)
      write_heaps(out);
    else
      write_reserved(out);
    out.end_list();
    out.key("device_traces");
    out.begin_list();
    int32_t last_device = traces_.empty() ? -1 : traces_.rbegin()->first;
    for (int32_t device = 0; device <= last_device; ++device) {
      out.begin_list();
      auto it = traces_.find(device);
      if (it != traces_.end()) {
        bool unknown = false, any = false;
        for (const Entry& e : it->second) {
          std::string_view c = category(e);
          any |= !c.empty();
          unknown |= c == "unknown";
          write_entry(out, e, c);
        }
        // The viewer needs category 'unknown' among the categories it is given (it throws
        // otherwise): a snapshot entry, which PyTorch writes too, says it, and changes nothing.
        if (any && !unknown) write_entry(out, Entry{Action::kSnapshot, 0, 0, 0, it->second.back().t_ns, 0}, "unknown");
        if (dropped_[device])
          warnings.push_back("device " + std::to_string(device) + ": kept the last " +
                             std::to_string(options_.max_entries) + " of " +
                             std::to_string(options_.max_entries + dropped_[device]) +
                             " events (--max-entries), as PyTorch's max_entries does; the viewer reconstructs "
                             "what came before from the final state");
      }
      out.end_list();
    }
    out.end_list();
    write_steps(out, last_device);
    out.end_dict();
    if (outside_count_)
      warnings.push_back(std::to_string(outside_count_) +
                         " blocks lay in no segment the allocator described: the viewer cannot draw them, they are "
                         "left out");
    return out.finish();
  }

 private:
  // The steps, as PyTorch writes its external annotations (2.3 and later; profiler ranges, which
  // the viewer draws over its timeline): {"stage": "START" or "END", "name", "device",
  // "time_us"}, a pair a step on every device, named memtrace.step: memtrace reads such a snapshot
  // back with its steps.
  void write_steps(Sink& out, int32_t last_device) {
    out.key("external_annotations");
    out.begin_list();
    const std::vector<uint64_t>& starts = phases_.step_starts();
    for (int32_t device = 0; device <= last_device; ++device) {
      if (!traces_.count(device)) continue;
      for (size_t k = 0; k < starts.size(); ++k) {
        const uint64_t end = k + 1 < starts.size() ? starts[k + 1] : std::max(last_t_ns_, starts[k]);
        for (auto [stage, t] : {std::pair{"START", starts[k]}, std::pair{"END", end}}) {
          out.begin_dict();
          out.key("stage");
          out.str(stage);
          out.key("name");
          out.str("memtrace.step");
          out.key("device");
          out.integer(device);
          out.key("time_us");
          out.integer(static_cast<int64_t>((origin_ns() + t) / 1000));
          out.end_dict();
        }
      }
    }
    out.end_list();
  }

  void add(int32_t device, Action action, uint64_t addr, uint64_t size, uint64_t stream, uint64_t t,
           uint64_t stack_id = 0, uint64_t allocation = kNoAllocation) {
    if (device < 0) return;
    auto& trace = traces_[device];
    trace.push_back(Entry{action, addr, size, stream, t, stack_id, allocation});
    if (trace.size() > options_.max_entries) {
      trace.pop_front();
      ++dropped_[device];
    }
  }

  void allocated_event(const Event& e, const ReplayStep& step, uint64_t heap_size) {
    if (e.api == Api::kTorchOom) {
      add(e.device, Action::kOom, e.device_free, e.size, e.stream, e.t_ns, e.stack_id);
      return;
    }
    if (e.layer != Layer::kAllocated || !e.ok()) return;
    if (e.api == Api::kTorchFree) {  // the tensor let go: its block waits for its streams, still live
      auto r = driver_.replay().regions().find(e.addr);
      if (r != driver_.replay().regions().end() && !outside_.count(e.addr) && !pending_.count(e.addr)) {
        add(r->second.device, Action::kFreeRequested, e.addr, r->second.size, e.stream, e.t_ns);
        pending_.insert(e.addr);
      }
      return;
    }
    if (e.kind == MemKind::kHeap) {
      int32_t device = step.device;
      if (e.op() == Op::kAlloc) {
        bool map = e.api == Api::kTorchSegmentMap;
        add(device, map ? Action::kSegmentMap : Action::kSegmentAlloc, e.addr, e.size, e.stream, e.t_ns, e.stack_id);
        auto made = driver_.replay().heaps().upper_bound(e.addr);
        if (made != driver_.replay().heaps().begin() && !segments_.count(std::prev(made)->first))
          segments_[std::prev(made)->first] = Segment{e.stack_id, e.stream, map, e.handle};
      } else if (e.api != Api::kNvtxMemHeapReset) {
        bool unmap = e.api == Api::kTorchSegmentUnmap;
        add(device, unmap ? Action::kSegmentUnmap : Action::kSegmentFree, e.addr, unmap ? e.size : heap_size, e.stream,
            e.t_ns);
        if (!unmap) segments_.erase(e.addr);
      }
    }
    for (const MemoryChange& c : step.memory_changes) {
      if (c.layer != Layer::kAllocated) continue;
      uint64_t bytes = static_cast<uint64_t>(c.bytes > 0 ? c.bytes : -c.bytes);
      if (c.arrived) {
        uint64_t allocation = ++allocations_;  // numbered as the category tracker numbers them
        // The viewer draws every block inside a segment: a region in no heap it cannot show.
        if (!inside_heap(c.addr, bytes)) {
          outside_.insert(c.addr);
          ++outside_count_;
          continue;
        }
        add(c.device, Action::kAlloc, c.addr, bytes, e.stream, e.t_ns, c.site.stack_id, allocation - 1);
      } else if (outside_.erase(c.addr)) {
        pending_.erase(c.addr);
        continue;
      } else {
        // The end of an allocation: PyTorch's blocks were requested free before (torch.free);
        // other allocators' regions are free at once.
        if (!pending_.erase(c.addr)) add(c.device, Action::kFreeRequested, c.addr, bytes, e.stream, e.t_ns);
        add(c.device, Action::kFreeCompleted, c.addr, bytes, e.stream, e.t_ns);
      }
    }
  }

  bool inside_heap(uint64_t addr, uint64_t size) const {
    auto h = driver_.replay().heaps().upper_bound(addr);
    if (h == driver_.replay().heaps().begin()) return false;
    --h;
    return addr + size <= h->first + h->second.size;
  }

  void reserved_event(const Event& e, const ReplayStep& step) {
    if (!e.ok()) {
      if (e.op() == Op::kAlloc && e.result == kOutOfMemoryResult && counts_as_device_memory(e.kind))
        add(e.device, Action::kOom, e.device_free, e.size, e.stream, e.t_ns, e.stack_id);
      return;
    }
    for (const MemoryChange& c : step.memory_changes) {
      if (c.layer != Layer::kReserved) continue;
      uint64_t bytes = static_cast<uint64_t>(c.bytes > 0 ? c.bytes : -c.bytes);
      uint64_t addr = e.addr;
      if (c.arrived) {
        add(c.device, Action::kSegmentAlloc, addr, bytes, e.stream, e.t_ns, c.site.stack_id);
        add(c.device, Action::kAlloc, addr, bytes, e.stream, e.t_ns, c.site.stack_id);
      } else {
        add(c.device, Action::kFreeRequested, addr, bytes, e.stream, e.t_ns);
        add(c.device, Action::kFreeCompleted, addr, bytes, e.stream, e.t_ns);
        add(c.device, Action::kSegmentFree, addr, bytes, e.stream, e.t_ns);
      }
    }
  }

  // A stack is written once, and each frame in it once, as PyTorch's own pickles share them.
  void frames(Sink& out, uint64_t stack_id) {
    if (stack_id && out.recall(stack_id)) return;
    out.begin_list();
    for (const FrameView& f : stacks_.frames(stack_id)) {
      uint64_t frame_key = f.id | (uint64_t(1) << 63);  // apart from stack ids
      if (f.id && out.recall(frame_key)) continue;
      out.begin_dict();
      out.key("filename");
      out.str(f.python || !f.file.empty() ? f.file : f.module);
      out.key("line");
      out.integer(f.line);
      out.key("name");
      out.str(f.function.empty() ? frame_label(f) : f.function);
      out.end_dict();
      if (f.id) out.keep(frame_key);
    }
    out.end_list();
    if (stack_id) out.keep(stack_id);
  }

  // An allocation's category, when the trace tells categories; empty otherwise.
  std::string_view category(const Entry& e) const {
    if (!categories_.known() || e.allocation == kNoAllocation) return {};
    return category_name(categories_.category_of_allocation(e.allocation));
  }

  void write_entry(Sink& out, const Entry& e, std::string_view category) {
    out.begin_dict();
    out.key("action");
    out.str(torch_action_info(e.action).name);
    out.key(e.action == Action::kOom ? "device_free" : "addr");
    out.integer(static_cast<int64_t>(e.addr));
    out.key("size");
    out.integer(static_cast<int64_t>(e.size));
    out.key("stream");
    out.integer(static_cast<int64_t>(e.stream));
    out.key("time_us");
    out.integer(static_cast<int64_t>((origin_ns() + e.t_ns) / 1000));
    if (e.stack_id) {
      out.key("frames");
      frames(out, e.stack_id);
    }
    if (!category.empty()) {
      out.key("category");
      out.str(category);
    }
    out.end_dict();
  }

  uint64_t origin_ns() const { return static_cast<uint64_t>(reader_.header().origin_unix_ns()); }

  struct Block {
    uint64_t addr, size, stack_id;
    const char* state;
  };
  void write_segment(Sink& out, int32_t device, uint64_t base, uint64_t size, const Segment& seg,
                     const std::vector<Block>& live) {
    // The blocks tile the segment in address order: the viewer places them one after the other.
    std::vector<Block> blocks;
    uint64_t at = base, allocated = 0, active = 0;
    for (const Block& b : live) {
      if (b.addr < at || b.addr + b.size > base + size) continue;  // outside, or over another: not drawable
      if (b.addr > at) blocks.push_back(Block{at, b.addr - at, 0, "inactive"});
      blocks.push_back(b);
      at = b.addr + b.size;
      active += b.size;
      if (std::string_view(b.state) == "active_allocated") allocated += b.size;
    }
    if (at < base + size) blocks.push_back(Block{at, base + size - at, 0, "inactive"});
    out.begin_dict();
    out.key("device");
    out.integer(device);
    out.key("address");
    out.integer(static_cast<int64_t>(base));
    out.key("total_size");
    out.integer(static_cast<int64_t>(size));
    out.key("allocated_size");
    out.integer(static_cast<int64_t>(allocated));
    out.key("active_size");
    out.integer(static_cast<int64_t>(active));
    out.key("requested_size");
    out.integer(static_cast<int64_t>(allocated));
    out.key("stream");
    out.integer(static_cast<int64_t>(seg.stream));
    out.key("segment_type");
    out.str(size <= (2u << 20) ? "small" : "large");  // PyTorch's small pool: 2 MiB segments
    out.key("segment_pool_id");
    const TorchPoolId pool = torch_pool_id(seg.pool);
    out.pair(static_cast<int64_t>(pool.first), static_cast<int64_t>(pool.second));
    out.key("is_expandable");
    out.boolean(seg.expandable);
    out.key("frames");
    frames(out, seg.stack_id);
    out.key("blocks");
    out.begin_list();
    for (const Block& b : blocks) {
      out.begin_dict();
      out.key("address");
      out.integer(static_cast<int64_t>(b.addr));
      out.key("size");
      out.integer(static_cast<int64_t>(b.size));
      out.key("requested_size");
      out.integer(static_cast<int64_t>(std::string_view(b.state) == "inactive" ? 0 : b.size));
      out.key("state");
      out.str(b.state);
      out.key("frames");
      frames(out, b.stack_id);
      out.end_dict();
    }
    out.end_list();
    out.end_dict();
  }

  void write_heaps(Sink& out) {
    std::map<uint64_t, Block> live;
    for (const auto& [addr, a] : driver_.replay().regions())
      if (!outside_.count(addr))
        live[addr] = Block{addr, a.size, a.stack_id, pending_.count(addr) ? "active_pending_free" : "active_allocated"};
    for (const auto& [base, heap] : driver_.replay().heaps()) {
      std::vector<Block> inside;
      for (auto it = live.lower_bound(base); it != live.end() && it->first < base + heap.size; ++it)
        inside.push_back(it->second);
      auto seg = segments_.find(base);
      write_segment(out, heap.device, base, heap.size, seg != segments_.end() ? seg->second : Segment{}, inside);
    }
  }

  void write_reserved(Sink& out) {
    std::map<uint64_t, std::pair<int32_t, LiveAllocation>> live;
    driver_.replay().for_each_live([&](uint64_t addr, const LiveAllocation& a) {
      if (counts_as_device_memory(a.kind) && a.device >= 0) live[addr] = {a.device, a};
    });
    for (const auto& [addr, item] : live) {
      const LiveAllocation& a = item.second;
      write_segment(out, item.first, addr, a.size, Segment{a.stack_id, 0, false},
                    {Block{addr, a.size, a.stack_id, "active_allocated"}});
    }
  }

  TraceReader& reader_;
  const MemoryVizOptions& options_;
  StackView stacks_;
  PassDriver driver_;       // its replay: the final state, after reading
  uint64_t heap_size_ = 0;  // of the heap the event frees, before the replay
  PhaseTracker phases_;
  uint64_t last_t_ns_ = 0;
  CategoryTracker categories_;
  uint64_t allocations_ = 0;
  bool allocated_ = false;
  std::map<int32_t, std::deque<Entry>> traces_;
  std::map<int32_t, uint64_t> dropped_;
  std::map<uint64_t, Segment> segments_;  // heaps' stacks and streams, by base
  std::unordered_set<uint64_t> pending_;  // PyTorch's blocks freed and not yet back in the cache
  std::unordered_set<uint64_t> outside_;  // live regions that lie in no heap: left out
  uint64_t outside_count_ = 0;
};

// Whether the trace at PATH has an allocated layer: then it is what the snapshot describes.
bool has_allocated_layer(const std::string& path, std::string& error, bool& found) {
  std::unique_ptr<TraceReader> reader = open_trace(path, error);
  if (!reader) return false;
  found = false;
  Event e;
  while (!found && reader->next(e)) found = e.layer == Layer::kAllocated && e.op() != Op::kMark;
  return true;
}

}  // namespace

bool export_memory_viz(const std::string& trace, const MemoryVizOptions& options, std::string& out,
                       std::vector<std::string>& warnings, std::string& error) {
  bool allocated = false;
  if (!has_allocated_layer(trace, error, allocated)) return false;
  std::unique_ptr<TraceReader> reader = open_trace(trace, error);
  if (!reader) return false;
  reader->prefetch();
  MemoryVizExport exporter(*reader, options);
  exporter.read(allocated);
  if (!reader->problem().empty()) warnings.push_back(trace + ": " + reader->problem());
  std::unique_ptr<Sink> sink;
  if (options.json)
    sink = std::make_unique<JsonSink>();
  else
    sink = std::make_unique<PickleSink>();
  out = exporter.write(*sink, warnings);
  return true;
}

}  // namespace memtrace
