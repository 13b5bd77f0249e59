#include "memtrace/importers/torch_snapshot.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "memtrace/format/torch_action.h"
#include "memtrace/importers/pickle.h"

namespace memtrace {

namespace {

using pickle::Document;
using pickle::Kind;
using pickle::Ref;

constexpr Ref kNoRef = Document::kNoValue;
constexpr int32_t kMaxDevices = 1024;
constexpr size_t kMaxFramesPerStack = 1024;

// An action this table does not know (whatever later versions add) is skipped.
using Action = TorchAction;

struct Entry {
  std::optional<Action> action;
  int32_t device = 0;
  uint64_t addr = 0, size = 0, stream = 0, device_free = 0;
  int64_t time_us = -1;
  Ref frames = kNoRef;
  std::string_view category;
};

// A block handed to a tensor, live (or waiting for its streams: pending) at some moment.
struct Block {
  uint64_t size = 0;
  Ref frames = kNoRef;
  bool pending = false;
  std::string_view category;
};

// Reserved memory: a segment, or a mapped range of an expandable one.
struct Range {
  uint64_t size = 0;
  bool expandable = false;
  Ref frames = kNoRef;
  uint64_t stream = 0;
};
using Ranges = std::map<uint64_t, Range>;

// Takes [addr, addr+size) out of RANGES. GONE(base, range) is told of each range it cut, KEPT(base,
// range) of each part of one that stays.
template <typename Gone, typename Kept>
void carve(Ranges& ranges, uint64_t addr, uint64_t size, Gone&& gone, Kept&& kept) {
  uint64_t end = addr + size;
  auto it = ranges.upper_bound(addr);
  if (it != ranges.begin()) --it;
  while (it != ranges.end() && it->first < end) {
    uint64_t base = it->first, range_end = base + it->second.size;
    if (range_end <= addr) {
      ++it;
      continue;
    }
    Range r = it->second;
    it = ranges.erase(it);
    gone(base, r);
    if (base < addr) {
      Range left = r;
      left.size = addr - base;
      ranges[base] = left;
      kept(base, left);
    }
    if (range_end > end) {
      Range right = r;
      right.size = range_end - end;
      it = ranges.emplace(end, right).first;
      kept(end, right);
      ++it;
    }
  }
}

bool is_python_file(std::string_view file) {
  return file.ends_with(".py") || (file.size() > 2 && file.front() == '<' && file.back() == '>');
}

// The frames PyTorch's own viewers leave out (torch/cuda/_memory_viz.py _frame_filter and
// torch/utils/viz/MemoryViz.js frameFilter, the same lists from 2.1 to the newest read): the
// capture itself, the C runtime's start, the interpreter's calls and the dispatcher's boxing.
bool viewer_omits(std::string_view name, std::string_view file) {
  for (std::string_view part : {"unwind::unwind", "CapturedTraceback::gather", "gather_with_cpp", "_start",
                                "__libc_start_main", "PyEval_", "PyObject_", "PyFunction_"})
    if (name.find(part) != std::string_view::npos) return true;
  for (std::string_view part :
       {"core/boxing", "/Register", "/Redispatch", "pythonrun.c", "Modules/main.c", "Objects/call.c",
        "Objects/methodobject.c", "pycore_ceval.h", "ceval.c", "cpython/abstract.h"})
    if (file.find(part) != std::string_view::npos) return true;
  return false;
}

class Importer {
 public:
  Importer(const Document& doc, const std::string& path, TraceWriter& writer, std::string& error)
      : doc_(doc), path_(path), w_(writer), error_(error) {}

  bool run() {
    Ref root = doc_.root(), segments = kNoRef, traces = kNoRef, annotations = kNoRef;
    if (doc_.is(root, Kind::kList)) {
      segments = root;  // before 2.0, a snapshot was its list of segments
    } else if (doc_.is(root, Kind::kDict) && doc_.find(root, "segments", segments) && doc_.is(segments, Kind::kList)) {
      if (doc_.find(root, "device_traces", traces) && !doc_.is(traces, Kind::kList))
        return fail("its 'device_traces' is not a list");
      if (doc_.find(root, "external_annotations", annotations) && !doc_.is(annotations, Kind::kList))
        annotations = kNoRef;
    } else {
      return fail("it holds no 'segments' list: it is not a PyTorch memory snapshot");
    }
    if (!read_segments(segments)) return false;
    if (traces != kNoRef && !read_traces(traces)) return false;
    if (annotations != kNoRef) read_annotations(annotations);
    reconstruct_start();
    write();
    return !w_.failed() || fail(w_.error());
  }

  // The allocated layer's events of a history the Python shim collected (its device_traces), with
  // their stacks interned in the writer, for merge_torch_history: each at its time_us less
  // OFFSET_NS (ns since the epoch to the trace's clock), or at kUntimed when it has none (2.1).
  bool history(int64_t offset_ns, std::vector<Event>& out) {
    Ref root = doc_.root(), traces = kNoRef;
    if (!doc_.is(root, Kind::kDict) || !doc_.find(root, "device_traces", traces) || !doc_.is(traces, Kind::kList))
      return fail("it holds no 'device_traces' list");
    if (!read_traces(traces)) return false;
    sink_ = &out;
    for (auto& [device, d] : devices_)
      for (const Entry& e : d.entries) {
        now_ =
            e.time_us < 0 ? kUntimedEvent : static_cast<uint64_t>(std::max<int64_t>(0, e.time_us * 1000 - offset_ns));
        apply(e, d.live);
      }
    return true;
  }

 private:
  bool fail(const std::string& what) {
    error_ = path_ + ": " + what;
    return false;
  }
  int64_t integer(Ref dict, std::string_view key, int64_t fallback = 0) const {
    Ref v;
    return doc_.find(dict, key, v) && doc_.is(v, Kind::kInt) ? doc_.integer(v) : fallback;
  }
  bool has_int(Ref dict, std::string_view key) const {
    Ref v;
    return doc_.find(dict, key, v) && doc_.is(v, Kind::kInt);
  }
  std::string_view text(Ref dict, std::string_view key) const {
    Ref v;
    return doc_.find(dict, key, v) ? doc_.text(v) : std::string_view();
  }
  Ref list(Ref dict, std::string_view key) const {
    Ref v;
    return doc_.find(dict, key, v) && doc_.is(v, Kind::kList) ? v : kNoRef;
  }
  bool device_ok(int64_t device) { return device >= 0 && device < kMaxDevices; }

  bool read_segments(Ref segments) {
    size_t n = 0;
    for (Ref seg : doc_.items(segments)) {
      std::string which = "segment " + std::to_string(n++);
      if (!doc_.is(seg, Kind::kDict)) return fail(which + " is not a dict");
      if (!has_int(seg, "address") || !has_int(seg, "total_size"))
        return fail(which + " has no 'address' or 'total_size'");
      int64_t device = integer(seg, "device");
      if (!device_ok(device)) return fail(which + " is on device " + std::to_string(device));
      uint64_t base = static_cast<uint64_t>(integer(seg, "address"));
      Range r;
      r.size = static_cast<uint64_t>(integer(seg, "total_size"));
      r.stream = static_cast<uint64_t>(integer(seg, "stream"));
      r.frames = list(seg, "frames");
      Ref v;
      r.expandable = doc_.find(seg, "is_expandable", v) && doc_.integer(v) != 0;
      devices_[static_cast<int32_t>(device)].reserved[base] = r;
      // Blocks tile the segment in address order; up to 2.0 they carry no address of their own.
      uint64_t addr = base;
      for (Ref b : doc_.items(list(seg, "blocks"))) {
        if (!doc_.is(b, Kind::kDict) || !has_int(b, "size")) return fail(which + " has a block without a 'size'");
        uint64_t size = static_cast<uint64_t>(integer(b, "size"));
        if (has_int(b, "address")) addr = static_cast<uint64_t>(integer(b, "address"));
        std::string_view state = text(b, "state");
        if (state == "active_allocated" || state == "active_pending_free" || state == "active_awaiting_free") {
          Block block;
          // What the tensor asked for, as the trace's allocations count it (and memory_viz draws
          // the block): requested_size since 2.0's snapshots; the block's size before.
          block.size = size;
          if (has_int(b, "requested_size") && integer(b, "requested_size") > 0)
            block.size = static_cast<uint64_t>(integer(b, "requested_size"));
          block.pending = state != "active_allocated";
          block.frames = list(b, "frames");
          block.category = text(b, "category");
          Ref history = list(b, "history");
          if (block.frames == kNoRef && history != kNoRef && !doc_.items(history).empty())
            block.frames = list(doc_.items(history).front(), "frames");
          devices_[static_cast<int32_t>(device)].blocks[addr] = block;
        }
        addr += size;
      }
    }
    return true;
  }

  bool read_traces(Ref traces) {
    int32_t device = 0;
    for (Ref trace : doc_.items(traces)) {
      if (device >= kMaxDevices) return fail("it has traces of more than " + std::to_string(kMaxDevices) + " devices");
      if (!doc_.is(trace, Kind::kList)) return fail("the trace of device " + std::to_string(device) + " is not a list");
      size_t n = 0;
      for (Ref t : doc_.items(trace)) {
        if (!doc_.is(t, Kind::kDict))
          return fail("entry " + std::to_string(n) + " of device " + std::to_string(device) + "'s trace is not a dict");
        ++n;
        Entry e;
        e.action = torch_action(text(t, "action"));
        e.device = device;
        e.addr = static_cast<uint64_t>(integer(t, "addr"));
        e.size = static_cast<uint64_t>(integer(t, "size"));
        e.stream = static_cast<uint64_t>(integer(t, "stream"));
        e.device_free = static_cast<uint64_t>(integer(t, "device_free", static_cast<int64_t>(e.addr)));
        if (has_int(t, "time_us")) e.time_us = integer(t, "time_us");
        e.frames = list(t, "frames");
        e.category = text(t, "category");
        timed_ = timed_ || e.time_us >= 0;
        devices_[device].entries.push_back(e);
      }
      ++device;
    }
    return true;
  }

  // An annotation is recorded once for each device (its "device" field): the program's range is
  // one, whatever the devices.
  void read_annotations(Ref annotations) {
    std::set<std::tuple<bool, std::string, int64_t>> seen;
    for (Ref a : doc_.items(annotations)) {
      if (!doc_.is(a, Kind::kDict) || !has_int(a, "time_us")) continue;
      std::string_view stage = text(a, "stage");
      if (stage != "START" && stage != "END") continue;
      Annotation annotation{stage == "START", std::string(text(a, "name")), integer(a, "time_us")};
      if (seen.emplace(annotation.start, annotation.name, annotation.time_us).second)
        annotations_.push_back(std::move(annotation));
    }
  }

  // Walks each device's trace backwards from the final state to the one before its first entry.
  void reconstruct_start() {
    auto nothing = [](uint64_t, const Range&) {};
    for (auto& [device, d] : devices_) {
      d.start_reserved = d.reserved;
      d.start_blocks = d.blocks;
      for (auto e = d.entries.rbegin(); e != d.entries.rend(); ++e) {
        if (!e->action) continue;
        switch (*e->action) {
          case Action::kAlloc: d.start_blocks.erase(e->addr); break;
          case Action::kFreeRequested:
            if (auto b = d.start_blocks.find(e->addr); b != d.start_blocks.end()) b->second.pending = false;
            break;
          case Action::kFreeCompleted: d.start_blocks[e->addr] = Block{e->size, e->frames, true, e->category}; break;
          case Action::kSegmentAlloc:
          case Action::kSegmentMap: carve(d.start_reserved, e->addr, e->size, nothing, nothing); break;
          case Action::kSegmentFree:
          case Action::kSegmentUnmap:
            d.start_reserved[e->addr] = Range{e->size, e->action == Action::kSegmentUnmap, e->frames, e->stream};
            break;
          default: break;
        }
      }
    }
  }

  uint64_t stack_of(Ref frames) {
    if (frames == kNoRef) return 0;
    auto [it, fresh] = stacks_.try_emplace(frames, 0);
    if (!fresh) return it->second;
    std::vector<uint64_t> ids;
    for (Ref f : doc_.items(frames)) {
      if (ids.size() == kMaxFramesPerStack) break;
      if (!doc_.is(f, Kind::kDict)) continue;
      std::string_view name = text(f, "name"), file = text(f, "filename");
      if (viewer_omits(name, file)) continue;
      if (file == "??") file = {};
      int64_t line = integer(f, "line");
      FrameInfo info;
      info.python = is_python_file(file);
      info.function = name;
      info.file = file;
      info.line = line > 0 && line < (1ll << 31) ? static_cast<uint32_t>(line) : 0;
      ids.push_back(w_.intern_frame(info));
    }
    it->second = ids.empty() ? 0 : w_.intern_stack(ids);
    return it->second;
  }

  void emit(Api api, int32_t device, uint64_t addr, uint64_t size, uint64_t stream = 0, Ref frames = kNoRef) {
    Event e;
    e.t_ns = now_;
    e.api = api;
    e.kind = api_info(api).kind;
    e.layer = api_info(api).layer;
    e.device = device;
    e.addr = addr;
    e.size = size;
    e.stream = stream;
    if (e.op() == Op::kAlloc) e.stack_id = stack_of(frames);
    put(e);
  }
  void put(const Event& e) {
    if (sink_)
      sink_->push_back(e);
    else
      w_.add(e);
  }
  void emit_named(Api api, uint64_t addr, std::string_view name) {
    Event e;
    e.t_ns = now_;
    e.api = api;
    e.kind = api_info(api).kind;
    e.layer = api_info(api).layer;
    e.addr = addr;
    e.name = w_.intern_string(name);
    put(e);
  }
  void emit_block(int32_t device, uint64_t addr, const Block& b) {
    emit(Api::kTorchAlloc, device, addr, b.size, 0, b.frames);
    if (!b.category.empty()) emit_named(Api::kTorchCategory, addr, b.category);
  }
  void reserve(int32_t device, uint64_t addr, const Range& r, bool with_heap) {
    emit(Api::kSnapshotSegment, device, addr, r.size, r.stream, r.frames);
    if (with_heap)
      emit(r.expandable ? Api::kTorchSegmentMap : Api::kTorchSegmentAlloc, device, addr, r.size, r.stream, r.frames);
  }
  // Reserved memory that went: its pieces freed, what stays of them reserved again.
  void release(int32_t device, Ranges& live, uint64_t addr, uint64_t size) {
    carve(
        live, addr, size, [&](uint64_t base, const Range&) { emit(Api::kSnapshotSegmentFree, device, base, 0); },
        [&](uint64_t base, const Range& r) { reserve(device, base, r, false); });
  }

  void apply(const Entry& e, Ranges& live) {
    if (!e.action) return;
    switch (*e.action) {
      case Action::kAlloc:
        emit(Api::kTorchAlloc, e.device, e.addr, e.size, e.stream, e.frames);
        if (!e.category.empty()) emit_named(Api::kTorchCategory, e.addr, e.category);
        break;
      case Action::kFreeRequested: emit(Api::kTorchFree, e.device, e.addr, e.size, e.stream); break;
      case Action::kFreeCompleted: emit(Api::kTorchFreeCompleted, e.device, e.addr, e.size, e.stream); break;
      case Action::kSegmentAlloc:
      case Action::kSegmentMap: {
        Range r{e.size, e.action == Action::kSegmentMap, e.frames, e.stream};
        if (sink_) {  // a history: the reserved layer was recorded live
          emit(r.expandable ? Api::kTorchSegmentMap : Api::kTorchSegmentAlloc, e.device, e.addr, r.size, r.stream,
               r.frames);
          break;
        }
        live[e.addr] = r;
        reserve(e.device, e.addr, r, true);
        break;
      }
      case Action::kSegmentFree:
      case Action::kSegmentUnmap:
        emit(e.action == Action::kSegmentFree ? Api::kTorchSegmentFree : Api::kTorchSegmentUnmap, e.device, e.addr,
             e.size, e.stream);
        if (!sink_) release(e.device, live, e.addr, e.size);
        break;
      case Action::kOom: {
        Event o;
        o.t_ns = now_;
        o.api = Api::kTorchOom;
        o.kind = MemKind::kDevice;
        o.layer = Layer::kAllocated;
        o.device = e.device;
        o.size = e.size;
        o.stream = e.stream;
        o.result = kOutOfMemoryResult;
        o.device_free = e.device_free;
        o.stack_id = stack_of(e.frames);
        put(o);
        break;
      }
      default: break;
    }
  }

  void write() {
    // Every device's entries, and the annotations, in one order: by time when the snapshot has
    // times, else as listed, device by device.
    struct Item {
      int64_t time_us;
      int32_t device;  // -1: an annotation
      size_t index;
    };
    std::vector<Item> order;
    for (auto& [device, d] : devices_)
      for (size_t i = 0; i < d.entries.size(); ++i) order.push_back({d.entries[i].time_us, device, i});
    if (timed_) {
      for (size_t i = 0; i < annotations_.size(); ++i) order.push_back({annotations_[i].time_us, -1, i});
      std::stable_sort(order.begin(), order.end(), [](const Item& a, const Item& b) { return a.time_us < b.time_us; });
    }
    int64_t origin_us = 0;
    for (const Item& item : order)
      if (item.time_us >= 0) {
        origin_us = item.time_us;
        break;
      }

    pb::TraceHeader header;
    header.set_memtrace_version(MEMTRACE_VERSION);
    header.add_command(path_);
    header.set_imported_from(kTorchSnapshotSource);
    // A damaged snapshot's times may be anything: one past what nanoseconds can hold is unknown.
    header.set_origin_unix_ns(origin_us <= INT64_MAX / 1000 ? origin_us * 1000 : 0);
    for (auto& [device, d] : devices_) {
      pb::Device* dev = header.add_devices();
      dev->set_ordinal(device);
    }
    w_.write_header(header);

    size_t early_blocks = 0, early_segments = 0;
    for (auto& entry : devices_) {
      const int32_t device = entry.first;
      Device& d = entry.second;
      d.live = {};
      // Each segment, then the blocks in it: at no moment is a segment shown empty that was not
      // (all at the start: what was live before the history began).
      auto block = d.start_blocks.begin();
      auto blocks_below = [&](uint64_t end) {
        for (; block != d.start_blocks.end() && block->first < end; ++block) {
          emit_block(device, block->first, block->second);
          if (block->second.pending) emit(Api::kTorchFree, device, block->first, block->second.size);
          ++early_blocks;
        }
      };
      for (const auto& [addr, r] : d.start_reserved) {
        blocks_below(addr);  // outside every segment (a damaged snapshot): before the next
        d.live[addr] = r;
        reserve(device, addr, r, true);
        ++early_segments;
        blocks_below(addr + r.size);
      }
      blocks_below(UINT64_MAX);
    }
    uint64_t n = 0;
    for (const Item& item : order) {
      uint64_t t = timed_ ? (item.time_us >= origin_us ? static_cast<uint64_t>(item.time_us - origin_us) * 1000 : 0)
                          : ++n * 1000;
      now_ = std::max(now_, t);
      if (item.device < 0) {
        const Annotation& a = annotations_[item.index];
        emit_named(a.start ? Api::kShimRangePush : Api::kShimRangePop, 0, a.name);
        continue;
      }
      Device& d = devices_[item.device];
      apply(d.entries[item.index], d.live);
    }

    pb::Footer footer;
    footer.set_end_ns(now_);
    footer.set_end_reason("the end of the snapshot");
    if (!timed_ && !order.empty())
      footer.add_notices(
          "this PyTorch snapshot records no times (PyTorch before 2.3): its events are shown 1 us apart, in order");
    if (early_blocks || early_segments)
      footer.add_notices(std::to_string(early_segments) + " segments and " + std::to_string(early_blocks) +
                         " blocks were live before PyTorch began recording this snapshot's trace: they are shown "
                         "from its start, with the stacks the snapshot kept");
    w_.finish(footer);
  }

  struct Device {
    Ranges reserved, start_reserved, live;
    std::map<uint64_t, Block> blocks, start_blocks;
    std::vector<Entry> entries;
  };
  struct Annotation {
    bool start;
    std::string name;
    int64_t time_us;
  };

  const Document& doc_;
  const std::string& path_;
  TraceWriter& w_;
  std::string& error_;
  std::map<int32_t, Device> devices_;
  std::vector<Annotation> annotations_;
  std::unordered_map<Ref, uint64_t> stacks_;
  bool timed_ = false;
  uint64_t now_ = 0;
  std::vector<Event>* sink_ = nullptr;  // a history's events go here, not to the writer
};

}  // namespace

bool import_torch_snapshot(std::string_view bytes, const std::string& path, TraceWriter& writer, std::string& error) {
  Document doc;
  std::string problem;
  if (!pickle::parse(bytes, doc, problem)) {
    error = path + ": not a readable pickle: " + problem;
    return false;
  }
  return Importer(doc, path, writer, error).run();
}

bool read_torch_history(std::string_view bytes, const std::string& path, uint64_t origin_monotonic_ns,
                        TraceWriter& writer, std::vector<Event>& out, TorchHistoryReading& reading,
                        std::string& error) {
  Document doc;
  std::string problem;
  if (!pickle::parse(bytes, doc, problem)) {
    error = path + ": not a readable pickle: " + problem;
    return false;
  }
  Ref root = doc.root(), clock = kNoRef, value = kNoRef;
  auto integer = [&](Ref dict, std::string_view key) {
    Ref v;
    return doc.find(dict, key, v) && doc.is(v, Kind::kInt) ? doc.integer(v) : 0;
  };
  if (!doc.is(root, Kind::kDict) || !doc.find(root, "memtrace_clock", clock) || !doc.is(clock, Kind::kDict)) {
    error = path + ": not what memtrace's Python shim writes (no 'memtrace_clock')";
    return false;
  }
  // ns since the epoch, less this, is ns since the trace's origin (CLOCK_MONOTONIC's).
  int64_t offset =
      integer(clock, "realtime_ns") - integer(clock, "monotonic_ns") + static_cast<int64_t>(origin_monotonic_ns);
  reading.ring_wrapped = integer(root, "memtrace_ring_wrapped") > 0;
  if (doc.find(root, "memtrace_when", value)) reading.when = std::string(doc.text(value));
  size_t before = out.size();
  if (!Importer(doc, path, writer, error).history(offset, out)) return false;
  for (size_t i = before; i < out.size(); ++i) reading.untimed |= out[i].t_ns == kUntimedEvent;
  return true;
}

}  // namespace memtrace
