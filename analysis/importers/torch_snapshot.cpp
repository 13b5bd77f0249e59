#include "memtrace/importers/torch_snapshot.h"

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "entry_spill.h"
#include "memtrace/format/torch_action.h"
#include "memtrace/format/torch_pool.h"
#include "memtrace/importers/pickle.h"
#include "snapshot_state.h"

namespace memtrace {

namespace {

using pickle::Document;
using pickle::Kind;
using pickle::Ref;

constexpr Ref kNoRef = Document::kNoValue;
constexpr int32_t kMaxDevices = 1024;
constexpr size_t kMaxFramesPerStack = 1024;

using Action = TorchAction;
using snapshot::Block;
using snapshot::carve;
using snapshot::Entry;
using snapshot::Range;
using snapshot::Ranges;

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

// The keys of an entry this reads; the parser says which of them each key is (DictView::Item::field).
enum EntryField : int { kAction, kAddr, kSize, kStream, kFrames, kTimeUs, kCategory, kDeviceFree };
const std::vector<std::string_view> kEntryFields = {"action", "addr",    "size",     "stream",
                                                    "frames", "time_us", "category", "device_free"};

// An entry of a device's trace, read from the pickle: none when ITEM is not one (a dict with a
// string 'action'). STACK_OF interns its frames; WITH_STACK says whether it is wanted.
template <typename StackOf, typename WithStack>
std::optional<Entry> entry_from(const Document& doc, const pickle::DictView& item, TraceWriter& w, StackOf&& stack_of,
                                WithStack&& with_stack) {
  Entry e;
  bool has_action = false, has_free = false;
  Ref frames = kNoRef;
  std::string_view category;
  // In order, each key setting its field whatever its value: a key given again replaces the
  // first, as the dict the pickle builds keeps only the last.
  for (const auto& [k, v, field] : item.items) {
    bool number = v.kind == Kind::kInt;
    const uint64_t as_unsigned = number ? static_cast<uint64_t>(v.integer) : 0;
    switch (field) {
      case kAction:
        has_action = v.kind == Kind::kString;
        e.action = has_action ? torch_action(v.text) : std::nullopt;
        break;
      case kAddr: e.addr = as_unsigned; break;
      case kSize: e.size = as_unsigned; break;
      case kStream: e.stream = as_unsigned; break;
      case kFrames: frames = v.kind == Kind::kList ? v.ref : kNoRef; break;
      case kTimeUs: e.time_us = number ? v.integer : -1; break;
      case kCategory: category = v.text; break;
      case kDeviceFree:
        e.device_free = as_unsigned;
        has_free = number;
        break;
      default: break;
    }
  }
  if (!has_action) return std::nullopt;
  if (!has_free) e.device_free = e.addr;
  if (frames != kNoRef && with_stack(e)) e.stack = stack_of(doc, frames);
  if (!category.empty()) e.category = w.intern_string(category);
  return e;
}

// Stacks already interned, by the Ref of the frames list in the parse that read it (a list the
// pickle shares: memtrace's exports), and by the Refs of its frames (PyTorch's own snapshots give
// every entry a list of its own, of frame dicts the memo shares): each stack is read once.
class StackCache {
 public:
  uint64_t* by_list(Ref list) { return list < lists_.size() && lists_[list] != kUnknown ? &lists_[list] : nullptr; }
  uint64_t* by_frames(const std::vector<Ref>& frames) {
    auto it = frames_.find(frames);
    return it == frames_.end() ? nullptr : &it->second.stack;
  }
  void add(Ref list, const std::vector<Ref>& frames, uint64_t stack) {
    if (list < kMaxListRef) {
      if (list >= lists_.size()) lists_.resize(list + 1, kUnknown);
      lists_[list] = stack;
    }
    Ref newest = frames.empty() ? 0 : *std::max_element(frames.begin(), frames.end());
    frames_.try_emplace(frames, Known{stack, newest});
  }
  // The values from FIRST on are forgotten (ItemSink::forget_from): so is what names them.
  void forget_from(Ref first) {
    if (first < lists_.size()) lists_.resize(first);
    std::erase_if(frames_, [first](const auto& known) { return known.second.newest >= first; });
  }

 private:
  struct RefsHash {
    size_t operator()(const std::vector<Ref>& refs) const {
      uint64_t h = refs.size();
      for (Ref r : refs) h = (h ^ r) * 0x9E3779B97F4A7C15ull;
      return static_cast<size_t>(h ^ (h >> 29));
    }
  };
  struct Known {
    uint64_t stack;
    Ref newest;  // its frames' newest Ref
  };
  // By the list's Ref: the parse numbers its values from 0 up, and numbers again from where it
  // forgets (forget_from), so a table is as large as the most values it held at once.
  static constexpr uint64_t kUnknown = UINT64_MAX;
  static constexpr Ref kMaxListRef = Ref{1} << 28;
  std::vector<uint64_t> lists_;
  std::unordered_map<std::vector<Ref>, Known, RefsHash> frames_;
};

// The snapshot is read in two passes, neither holding its traces: the first, over the pickle,
// keeps all but the entries of the devices' traces (segments, annotations: the state at the end),
// learns from the entries what was live before them, and puts each list's entries in a temporary
// file of their own (EntrySpill); the second reads them back, and writes them, the devices' merged
// by time. Where no temporary file can be had (or SPILL is false), the second pass reads each
// device's entries again from the pickle, from where they begin.
class Importer : public pickle::ItemSink {
 public:
  Importer(std::string_view bytes, const std::string& path, TraceWriter& writer, std::string& error,
           const ReleaseBytes& done_with = nullptr, unsigned walkers = 1, bool spill = true)
      : parse_(bytes, done_with, walkers),
        path_(path),
        w_(writer),
        error_(error),
        done_with_(done_with),
        spill_(spill) {}

  bool parse() {
    std::string problem;
    if (parse_.run(*this, problem)) return true;
    error_ = path_ + ": not a readable pickle: " + problem;
    return false;
  }
  const Document& doc() const { return parse_.document(); }

  bool takes_dicts() const override { return true; }
  const std::vector<std::string_view>& field_names() const override { return kEntryFields; }
  bool take(const Document&, Ref, Ref) override { return false; }  // an entry is a dict
  // The first pass: each entry seen once, the first batch of each list kept.
  bool take_dict(const Document& doc, Ref list, const pickle::DictView& item) override {
    // Its stack is read for the first batch (written from here) and where the trace frees what it
    // did not allocate (live before it); the second pass reads the rest.
    auto known = traces_.find(list);
    Trace* seen = known == traces_.end() ? nullptr : &known->second;
    std::optional<Entry> e = entry_from(
        doc, item, w_, [&](const Document& d, Ref f) { return stack_of(d, f, stacks_); },
        [&](const Entry& entry) {
          return !seen || seen->spill || !seen->head_complete || seen->start.may_keep(entry);
        });
    if (!e) return false;
    Trace& t = seen ? *seen : traces_[list];
    if (!seen && spill_) {  // what was live before the entries is learned on the spill's thread
      snapshot::StartState* start = &t.start;
      t.spill = snapshot::EntrySpill::create([start](const Entry& entry) { start->see(entry); });
    }
    if (t.spill)
      t.spill->add(*e);
    else
      t.start.see(*e);
    if (!t.head_complete) t.head.push_back(*e);
    if (e->time_us >= 0) t.first_time_us = std::min<uint64_t>(t.first_time_us, static_cast<uint64_t>(e->time_us));
    return true;
  }
  void batch_done(Ref list, const pickle::ResumePoint& here) override {
    Trace& t = traces_[list];
    if (!t.head_complete) t.resume = here;
    t.head_complete = true;
    t.end = here.offset;
    release_below(here.offset);
  }
  void forget_from(Ref first) override {
    stacks_.forget_from(first);
    traces_.erase(traces_.lower_bound(first), traces_.end());  // only a list built inside an entry
  }

  bool run() { return prepare() && write_events(); }

  // After parse(): what the second pass needs, read and checked (the segments, which entries each
  // device's trace holds); false, with the error set, for a snapshot that cannot be imported.
  bool prepare() {
    const Document& doc = parse_.document();
    Ref root = doc.root(), segments = kNoRef, traces = kNoRef, annotations = kNoRef;
    if (doc.is(root, Kind::kList)) {
      segments = root;  // before 2.0, a snapshot was its list of segments
    } else if (doc.is(root, Kind::kDict) && doc.find(root, "segments", segments) && doc.is(segments, Kind::kList)) {
      if (doc.find(root, "device_traces", traces) && !doc.is(traces, Kind::kList))
        return fail("its 'device_traces' is not a list");
      if (doc.find(root, "external_annotations", annotations) && !doc.is(annotations, Kind::kList))
        annotations = kNoRef;
    } else {
      return fail("it holds no 'segments' list: it is not a PyTorch memory snapshot");
    }
    released_ = 0;  // the second pass reads from the devices' traces on
    Ref settings = kNoRef;
    if (doc.is(root, Kind::kDict) && doc.find(root, "allocator_settings", settings)) read_settings(settings);
    if (!read_segments(segments)) return false;
    if (traces != kNoRef && !read_traces(traces)) return false;
    if (annotations != kNoRef) read_annotations(annotations);
    reconstruct_start();
    return true;
  }
  // After prepare(): the trace, header to footer.
  bool write_events() { return write() && (!w_.failed() || fail(w_.error())); }

  // The allocated layer's events of a history the Python shim collected (its device_traces), with
  // their stacks interned in the writer, for merge_torch_history: each at its time_us less
  // OFFSET_NS (ns since the epoch to the trace's clock), or at kUntimed when it has none (2.1).
  bool history(int64_t offset_ns, std::vector<Event>& out) {
    const Document& doc = parse_.document();
    Ref root = doc.root(), traces = kNoRef;
    if (!doc.is(root, Kind::kDict) || !doc.find(root, "device_traces", traces) || !doc.is(traces, Kind::kList))
      return fail("it holds no 'device_traces' list");
    if (!read_traces(traces)) return false;
    sink_ = &out;
    for (auto& [device, d] : devices_) {
      if (!d.entries) continue;  // segments only: no trace
      const Entry* e;
      while ((e = d.entries->peek(error_))) {
        now_ =
            e->time_us < 0 ? kUntimedEvent : static_cast<uint64_t>(std::max<int64_t>(0, e->time_us * 1000 - offset_ns));
        apply(*e, d.live);
        d.entries->pop();
      }
      if (!d.entries->ok()) return fail(error_);
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
    return doc().find(dict, key, v) && doc().is(v, Kind::kInt) ? doc().integer(v) : fallback;
  }
  // A segment's private pool: segment_pool_id, a pair of ints (torch/csrc/cuda/Module.cpp v2.6.0),
  // (0, 0) for the default pool; 0 where the snapshot does not say.
  uint64_t pool_of(Ref segment) const {
    Ref v;
    if (!doc().find(segment, "segment_pool_id", v) || !(doc().is(v, Kind::kTuple) || doc().is(v, Kind::kList)))
      return 0;
    uint64_t id[2] = {0, 0};
    size_t n = 0;
    for (Ref part : doc().items(v)) {
      if (n == 2 || !doc().is(part, Kind::kInt) || doc().integer(part) < 0) return 0;
      id[n++] = static_cast<uint64_t>(doc().integer(part));
    }
    return n == 2 ? torch_pool_key(id[0], id[1]) : 0;
  }
  bool has_int(Ref dict, std::string_view key) const {
    Ref v;
    return doc().find(dict, key, v) && doc().is(v, Kind::kInt);
  }
  std::string_view text(Ref dict, std::string_view key) const {
    Ref v;
    return doc().find(dict, key, v) ? doc().text(v) : std::string_view();
  }
  Ref list(Ref dict, std::string_view key) const {
    Ref v;
    return doc().find(dict, key, v) && doc().is(v, Kind::kList) ? v : kNoRef;
  }
  bool device_ok(int64_t device) { return device >= 0 && device < kMaxDevices; }

  bool read_segments(Ref segments) {
    size_t n = 0;
    for (Ref seg : doc().items(segments)) {
      std::string which = "segment " + std::to_string(n++);
      if (!doc().is(seg, Kind::kDict)) return fail(which + " is not a dict");
      if (!has_int(seg, "address") || !has_int(seg, "total_size"))
        return fail(which + " has no 'address' or 'total_size'");
      int64_t device = integer(seg, "device");
      if (!device_ok(device)) return fail(which + " is on device " + std::to_string(device));
      uint64_t base = static_cast<uint64_t>(integer(seg, "address"));
      Range r;
      r.size = static_cast<uint64_t>(integer(seg, "total_size"));
      r.stream = static_cast<uint64_t>(integer(seg, "stream"));
      r.stack = stack_of(doc(), list(seg, "frames"), stacks_);
      Ref v;
      r.expandable = doc().find(seg, "is_expandable", v) && doc().integer(v) != 0;
      r.pool = pool_of(seg);
      devices_[static_cast<int32_t>(device)].reserved[base] = r;
      // Blocks tile the segment in address order; up to 2.0 they carry no address of their own.
      uint64_t addr = base;
      for (Ref b : doc().items(list(seg, "blocks"))) {
        if (!doc().is(b, Kind::kDict) || !has_int(b, "size")) return fail(which + " has a block without a 'size'");
        uint64_t size = static_cast<uint64_t>(integer(b, "size"));
        if (has_int(b, "address")) {
          addr = static_cast<uint64_t>(integer(b, "address"));
          addressed_ = true;
        }
        std::string_view state = text(b, "state");
        if (state == "active_allocated" || state == "active_pending_free" || state == "active_awaiting_free") {
          Block block;
          // What the tensor asked for, as the trace's allocations count it (and memory_viz draws
          // the block): requested_size since 2.0's snapshots; the block's size before.
          block.size = size;
          if (has_int(b, "requested_size") && integer(b, "requested_size") > 0)
            block.size = static_cast<uint64_t>(integer(b, "requested_size"));
          block.pending = state != "active_allocated";
          Ref frames = list(b, "frames");
          if (!text(b, "category").empty()) block.category = w_.intern_string(text(b, "category"));
          Ref history = list(b, "history");
          if (frames == kNoRef && history != kNoRef && !doc().items(history).empty())
            frames = list(doc().items(history).front(), "frames");
          block.stack = stack_of(doc(), frames, stacks_);
          devices_[static_cast<int32_t>(device)].blocks[addr] = block;
        }
        addr += size;
      }
    }
    return true;
  }

  // allocator_settings (2.3 on: CUDAAllocatorConfig's options as they took effect) in
  // PYTORCH_CUDA_ALLOC_CONF's syntax, the options left at PyTorch's defaults left out.
  void read_settings(Ref settings) {
    if (!doc().is(settings, Kind::kDict)) return;
    has_settings_ = true;
    Ref v;
    auto add = [&](const std::string& item) { alloc_conf_ += (alloc_conf_.empty() ? "" : ",") + item; };
    if (doc().find(settings, "expandable_segments", v) && doc().integer(v)) add("expandable_segments:True");
    if (doc().find(settings, "max_split_size", v) && doc().integer(v) > 0 && doc().integer(v) < INT64_MAX)
      add("max_split_size_mb:" + std::to_string(doc().integer(v) / 1048576));
    if (doc().find(settings, "garbage_collection_threshold", v) && doc().number(v) > 0) {
      char text[32];
      std::snprintf(text, sizeof text, "%g", doc().number(v));
      add(std::string("garbage_collection_threshold:") + text);
    }
    if (doc().find(settings, "roundup_power2_divisions", v) && doc().is(v, Kind::kDict)) {
      std::string list;
      bool any = false;
      for (const auto& [key, divisions] : doc().entries(v)) {
        list +=
            (list.empty() ? "" : ",") + std::string(doc().text(key)) + ":" + std::to_string(doc().integer(divisions));
        any = any || doc().integer(divisions) != 0;
      }
      if (any) add("roundup_power2_divisions:[" + list + "]");
    }
  }

  bool read_traces(Ref traces) {
    int32_t device = 0;
    for (Ref trace : doc().items(traces)) {
      if (device >= kMaxDevices) return fail("it has traces of more than " + std::to_string(kMaxDevices) + " devices");
      if (!doc().is(trace, Kind::kList))
        return fail("the trace of device " + std::to_string(device) + " is not a list");
      // Its entries were taken as they came; what is left in it was not one (a dict without an
      // action is skipped, as an action this table does not know).
      for (Ref t : doc().items(trace))
        if (!doc().is(t, Kind::kDict))
          return fail("an entry of device " + std::to_string(device) + "'s trace is not a dict");
      auto taken = traces_.find(trace);
      if (taken != traces_.end()) {  // a device with entries (PyTorch lists every device, idle or not)
        Device& d = devices_[device];
        Trace& t = taken->second;
        const bool spilled = t.spill && t.spill->finish();  // its start state is whole once it is
        d.start = std::move(t.start);
        timed_ = timed_ || t.first_time_us != UINT64_MAX;
        first_time_us_ = std::min(first_time_us_, t.first_time_us);
        d.entries = std::make_unique<EntryStream>(*this, device, std::move(t.head));
        if (spilled)
          d.entries->read_back(std::move(t.spill));
        else if (t.end > t.resume.offset)
          d.entries->resume(parse_, t.resume, t.end);
        traces_.erase(taken);
      }
      ++device;
    }
    return true;
  }

  // An annotation is recorded once for each device (its "device" field): the program's range is
  // one, whatever the devices.
  void read_annotations(Ref annotations) {
    std::set<std::tuple<bool, std::string, int64_t>> seen;
    for (Ref a : doc().items(annotations)) {
      if (!doc().is(a, Kind::kDict) || !has_int(a, "time_us")) continue;
      std::string_view stage = text(a, "stage");
      if (stage != "START" && stage != "END") continue;
      Annotation annotation{stage == "START", std::string(text(a, "name")), integer(a, "time_us")};
      if (seen.emplace(annotation.start, annotation.name, annotation.time_us).second)
        annotations_.push_back(std::move(annotation));
    }
  }

  // What was live before each device's trace began (StartState, from the first pass).
  void reconstruct_start() {
    for (auto& [device, d] : devices_) {
      d.start_reserved = d.start.reserved(d.reserved);
      d.start_blocks = d.start.blocks(d.blocks);
    }
  }

  // The stack FRAMES (a list in DOC) names, interned; each is read once (StackCache).
  uint64_t stack_of(const Document& doc, Ref frames, StackCache& cache) {
    if (frames == kNoRef) return 0;
    if (const uint64_t* known = cache.by_list(frames)) return *known;
    const std::vector<Ref>& items = doc.items(frames);
    if (const uint64_t* known = cache.by_frames(items)) return *known;
    std::vector<uint64_t> ids;
    auto text = [&](Ref f, std::string_view key) {
      Ref v;
      return doc.find(f, key, v) ? doc.text(v) : std::string_view();
    };
    for (Ref f : items) {
      if (ids.size() == kMaxFramesPerStack) break;
      if (!doc.is(f, Kind::kDict)) continue;
      std::string_view name = text(f, "name"), file = text(f, "filename");
      if (viewer_omits(name, file)) continue;
      if (file == "??") file = {};
      Ref v;
      int64_t line = doc.find(f, "line", v) && doc.is(v, Kind::kInt) ? doc.integer(v) : 0;
      FrameInfo info;
      info.python = is_python_file(file);
      info.function = name;
      info.file = file;
      info.line = line > 0 && line < (1ll << 31) ? static_cast<uint32_t>(line) : 0;
      ids.push_back(w_.intern_frame(info));
    }
    uint64_t stack = ids.empty() ? 0 : w_.intern_stack(ids);
    cache.add(frames, items, stack);
    return stack;
  }

  void emit(Api api, int32_t device, uint64_t addr, uint64_t size, uint64_t stream = 0, uint64_t stack = 0,
            uint64_t handle = 0) {
    Event e;
    e.t_ns = now_;
    e.api = api;
    e.kind = api_info(api).kind;
    e.layer = api_info(api).layer;
    e.device = device;
    e.addr = addr;
    e.size = size;
    e.stream = stream;
    e.handle = handle;
    if (e.op() == Op::kAlloc) e.stack_id = stack;
    if (before_recording_) e.flags |= kEventBeforeRecording;
    put(e);
  }
  void put(const Event& e) {
    if (sink_)
      sink_->push_back(e);
    else
      w_.add(e);
  }
  // NAME: a string the writer interned.
  void emit_named(Api api, uint64_t addr, uint64_t name) {
    Event e;
    e.t_ns = now_;
    e.api = api;
    e.kind = api_info(api).kind;
    e.layer = api_info(api).layer;
    e.addr = addr;
    e.name = name;
    if (before_recording_) e.flags |= kEventBeforeRecording;
    put(e);
  }
  void emit_block(int32_t device, uint64_t addr, const Block& b) {
    emit(Api::kTorchAlloc, device, addr, b.size, 0, b.stack);
    if (b.category) emit_named(Api::kTorchCategory, addr, b.category);
  }
  void reserve(int32_t device, uint64_t addr, const Range& r, bool with_heap) {
    emit(Api::kSnapshotSegment, device, addr, r.size, r.stream, r.stack);
    if (with_heap)
      emit(r.expandable ? Api::kTorchSegmentMap : Api::kTorchSegmentAlloc, device, addr, r.size, r.stream, r.stack,
           r.pool);
  }
  // Reserved memory that went: its pieces freed, what stays of them reserved again.
  void release(int32_t device, Ranges& live, uint64_t addr, uint64_t size) {
    carve(
        live, addr, size, [&](uint64_t base, const Range&) { emit(Api::kSnapshotSegmentFree, device, base, 0); },
        [&](uint64_t base, const Range& r) { reserve(device, base, r, false); });
  }

  // The pool of reserved memory an entry made: that of the segment at the end that holds it, if
  // any (the entries themselves name no pool before 2.12's 'pool_id').
  uint64_t pool_at_end(int32_t device, uint64_t addr, uint64_t size) const {
    auto d = devices_.find(device);
    if (d == devices_.end()) return 0;
    auto it = d->second.reserved.upper_bound(addr);
    if (it == d->second.reserved.begin()) return 0;
    --it;
    return addr - it->first < it->second.size && size <= it->second.size - (addr - it->first) ? it->second.pool : 0;
  }

  void apply(const Entry& e, Ranges& live) {
    if (!e.action) return;
    switch (*e.action) {
      case Action::kAlloc:
        emit(Api::kTorchAlloc, e.device, e.addr, e.size, e.stream, e.stack);
        if (e.category) emit_named(Api::kTorchCategory, e.addr, e.category);
        break;
      case Action::kFreeRequested: emit(Api::kTorchFree, e.device, e.addr, e.size, e.stream); break;
      case Action::kFreeCompleted: emit(Api::kTorchFreeCompleted, e.device, e.addr, e.size, e.stream); break;
      case Action::kSegmentAlloc:
      case Action::kSegmentMap: {
        Range r{e.size, e.action == Action::kSegmentMap, e.stack, e.stream, pool_at_end(e.device, e.addr, e.size)};
        if (sink_) {  // a history: the reserved layer was recorded live
          emit(r.expandable ? Api::kTorchSegmentMap : Api::kTorchSegmentAlloc, e.device, e.addr, r.size, r.stream,
               r.stack, r.pool);
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
        o.stack_id = e.stack;
        put(o);
        break;
      }
      default: break;
    }
  }

  // Writes the trace. False with ERROR set when the second pass finds the pickle not as the
  // first read it.
  bool write() {
    // Every device's entries, and the annotations, in one order: by time when the snapshot has
    // times, else as listed, device by device.
    std::stable_sort(annotations_.begin(), annotations_.end(),
                     [](const Annotation& a, const Annotation& b) { return a.time_us < b.time_us; });
    uint64_t first_us = first_time_us_;
    if (timed_)
      for (const Annotation& a : annotations_)
        if (a.time_us >= 0) first_us = std::min(first_us, static_cast<uint64_t>(a.time_us));
    int64_t origin_us = timed_ && first_us <= INT64_MAX ? static_cast<int64_t>(first_us) : 0;

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
    // The release the format first appeared in, and the allocator's settings, for `whatif`.
    const char* release = has_settings_ || timed_ ? "2.3" : addressed_ ? "2.1" : "2.0";
    emit_named(Api::kTorchSetting, 0, w_.intern_string(std::string("torch=") + release));
    if (has_settings_) emit_named(Api::kTorchSetting, 0, w_.intern_string("PYTORCH_CUDA_ALLOC_CONF=" + alloc_conf_));

    size_t early_blocks = 0, early_segments = 0;
    before_recording_ = true;  // what was live before the trace began
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
      d.start_reserved = {};
      d.start_blocks = {};
    }
    before_recording_ = false;
    // The devices' entries merged: the earliest next (the lower device on a tie, annotations after
    // entries of the same time); each device's in the order PyTorch listed them.
    uint64_t n = 0, applied = 0;
    size_t next_annotation = 0;
    bool any_entry = false;
    for (;;) {
      Device* from = nullptr;
      const Entry* next = nullptr;
      for (auto& [device, d] : devices_) {
        if (!d.entries) continue;  // segments only: no trace
        const Entry* e = d.entries->peek(error_);
        if (!d.entries->ok()) return fail(error_);
        if (!e || (next && (!timed_ || e->time_us >= next->time_us))) continue;
        from = &d;
        next = e;
      }
      bool annotation = timed_ && next_annotation < annotations_.size() &&
                        (!next || annotations_[next_annotation].time_us < next->time_us);
      if (!next && !annotation) break;
      int64_t time_us = annotation ? annotations_[next_annotation].time_us : next->time_us;
      uint64_t t = timed_ ? (time_us >= origin_us ? static_cast<uint64_t>(time_us - origin_us) * 1000 : 0) : ++n * 1000;
      now_ = std::max(now_, t);
      if (annotation) {
        const Annotation& a = annotations_[next_annotation++];
        emit_named(a.start ? Api::kShimRangePush : Api::kShimRangePop, 0, w_.intern_string(a.name));
        continue;
      }
      any_entry = true;
      Entry e = *next;
      from->entries->pop();
      apply(e, from->live);
      if (++applied % 4096 == 0) {                 // what no device's stream reads again
        if (w_.failed()) return fail(w_.error());  // no one reads on (the pipe's reader went)
        size_t below = SIZE_MAX;
        for (auto& [device, d] : devices_)
          if (d.entries) below = std::min(below, d.entries->position());
        if (below != SIZE_MAX) release_below(below);
      }
    }

    pb::Footer footer;
    footer.set_end_ns(now_);
    footer.set_end_reason("the end of the snapshot");
    if (!timed_ && any_entry)
      footer.add_notices(
          "this PyTorch snapshot records no times (PyTorch before 2.3): its events are shown 1 us apart, in order");
    if (early_blocks || early_segments)
      footer.add_notices(std::to_string(early_segments) + " segments and " + std::to_string(early_blocks) +
                         " blocks were live before PyTorch began recording this snapshot's trace: they are shown "
                         "from its start, with the stacks the snapshot kept");
    w_.finish(footer);
    return true;
  }

  // A device's entries in order: the first batch, kept by the first pass, then the rest read
  // again from the pickle as they are asked for.
  class EntryStream : public pickle::ItemSink {
   public:
    EntryStream(Importer& importer, int32_t device, std::vector<Entry> head)
        : importer_(importer), device_(device), buffer_(head.begin(), head.end()) {
      for (Entry& e : buffer_) e.device = device;
    }
    void resume(const pickle::StreamingParse& parse, const pickle::ResumePoint& at, size_t end) {
      // Its own stack cache: the parse starts from a copy of the first's shared values, renumbered.
      cursor_ = parse.resume_list(at, end, *this);
    }
    // Every entry from SPILL instead (the first batch too).
    void read_back(std::unique_ptr<snapshot::EntrySpill> spill) {
      buffer_.clear();
      spill_ = std::move(spill);
    }
    // The next entry, or null at the end or on a problem (then ok() is false and ERROR says why).
    const Entry* peek(std::string& error) {
      if (spill_) {
        if (buffer_.empty() && ok_) {
          Entry e;
          if (spill_->next(e)) {
            e.device = device_;
            buffer_.push_back(e);
          } else if (!spill_->error().empty()) {
            ok_ = false;
            error = spill_->error();
          }
        }
      } else {
        while (buffer_.empty() && ok_ && cursor_ && !cursor_->done()) ok_ = cursor_->next(error);
      }
      return buffer_.empty() ? nullptr : &buffer_.front();
    }
    void pop() { buffer_.pop_front(); }
    bool ok() const { return ok_; }
    // The first byte it may still read (SIZE_MAX: none).
    size_t position() const { return cursor_ && !cursor_->done() ? cursor_->position() : SIZE_MAX; }

    bool takes_dicts() const override { return true; }
    const std::vector<std::string_view>& field_names() const override { return kEntryFields; }
    bool take(const Document&, Ref, Ref) override { return false; }  // an entry is a dict
    bool take_dict(const Document& doc, Ref list, const pickle::DictView& item) override {
      if (!cursor_ || list != cursor_->list()) return false;
      std::optional<Entry> e = entry_from(
          doc, item, importer_.w_, [&](const Document& d, Ref f) { return importer_.stack_of(d, f, stacks_); },
          [](const Entry&) { return true; });
      if (!e) return false;
      e->device = device_;
      buffer_.push_back(*e);
      return true;
    }
    void forget_from(Ref first) override { stacks_.forget_from(first); }

   private:
    Importer& importer_;
    int32_t device_;
    std::deque<Entry> buffer_;
    std::unique_ptr<pickle::ListCursor> cursor_;
    std::unique_ptr<snapshot::EntrySpill> spill_;
    StackCache stacks_;
    bool ok_ = true;
  };

  struct Device {
    Ranges reserved, start_reserved, live;
    std::map<uint64_t, Block> blocks, start_blocks;
    snapshot::StartState start;
    std::unique_ptr<EntryStream> entries;
  };
  struct Annotation {
    bool start;
    std::string name;
    int64_t time_us;
  };
  // The first pass's view of a list of entries (a device's trace, once read_traces knows which).
  struct Trace {
    std::vector<Entry> head;  // its first batch
    bool head_complete = false;
    pickle::ResumePoint resume;                   // after the first batch
    size_t end = 0;                               // after the last
    snapshot::StartState start;                   // before the spill, whose thread sees into it: gone after it
    std::unique_ptr<snapshot::EntrySpill> spill;  // all of them, when one could be made
    uint64_t first_time_us = UINT64_MAX;
  };

  // Tells done_with_ of the bytes before OFFSET, a few MiB at a time.
  void release_below(size_t offset) {
    constexpr size_t kStep = 8 << 20;
    if (!done_with_ || offset < released_ + kStep) return;
    done_with_(released_, offset);
    released_ = offset;
  }

  pickle::StreamingParse parse_;
  const std::string& path_;
  TraceWriter& w_;
  std::string& error_;
  ReleaseBytes done_with_;
  bool spill_;
  size_t released_ = 0;
  std::map<int32_t, Device> devices_;
  std::vector<Annotation> annotations_;
  StackCache stacks_;            // the first pass's
  std::map<Ref, Trace> traces_;  // by the list the first pass read them in
  bool timed_ = false;
  bool before_recording_ = false;  // writing what was live before the trace began
  bool addressed_ = false;         // blocks carry their addresses (2.1 on)
  bool has_settings_ = false;      // allocator_settings (2.3 on)
  std::string alloc_conf_;         // allocator_settings in PYTORCH_CUDA_ALLOC_CONF's syntax
  uint64_t first_time_us_ = UINT64_MAX;
  uint64_t now_ = 0;
  std::vector<Event>* sink_ = nullptr;  // a history's events go here, not to the writer
};

}  // namespace

bool import_torch_snapshot(std::string_view bytes, const std::string& path, TraceWriter& writer, std::string& error,
                           const ReleaseBytes& done_with, bool spill) {
  Importer importer(bytes, path, writer, error, done_with, 1, spill);
  return importer.parse() && importer.run();
}

struct TorchSnapshotImport::State {
  std::string error;
  Importer importer;
  State(std::string_view bytes, const std::string& path, TraceWriter& writer, const ReleaseBytes& done_with,
        unsigned walkers)
      : importer(bytes, path, writer, error, done_with, walkers) {}
};

TorchSnapshotImport::TorchSnapshotImport(std::string_view bytes, const std::string& path, TraceWriter& writer,
                                         const ReleaseBytes& done_with, unsigned walkers)
    : state_(std::make_unique<State>(bytes, path, writer, done_with, walkers)) {}
TorchSnapshotImport::~TorchSnapshotImport() = default;

bool TorchSnapshotImport::check() { return state_->importer.parse() && state_->importer.prepare(); }
bool TorchSnapshotImport::write() { return state_->importer.write_events(); }
const std::string& TorchSnapshotImport::error() const { return state_->error; }

bool read_torch_history(std::string_view bytes, const std::string& path, uint64_t origin_monotonic_ns,
                        TraceWriter& writer, std::vector<Event>& out, TorchHistoryReading& reading,
                        std::string& error) {
  Importer importer(bytes, path, writer, error);
  if (!importer.parse()) return false;
  const Document& doc = importer.doc();
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
  if (!importer.history(offset, out)) return false;
  for (size_t i = before; i < out.size(); ++i) reading.untimed |= out[i].t_ns == kUntimedEvent;
  return true;
}

}  // namespace memtrace
