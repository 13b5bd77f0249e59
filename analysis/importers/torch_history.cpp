#include "memtrace/importers/torch_history.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <unordered_map>

#include "memtrace/format/trace_reader.h"
#include "memtrace/format/trace_writer.h"
#include "memtrace/importers/torch_snapshot.h"

namespace memtrace {

namespace fs = std::filesystem;

namespace {

// A recorded call that obtained or gave back reserved memory: what an untimed history's segments
// are placed by.
struct Anchor {
  uint64_t t_ns, addr, size;
  bool alloc, mapping;
};

bool anchored_by(const Event& history, const Anchor& a) {
  switch (history.api) {
    case Api::kTorchSegmentAlloc: return a.alloc && !a.mapping && a.addr == history.addr && a.size == history.size;
    case Api::kTorchSegmentFree: return !a.alloc && !a.mapping && a.addr == history.addr;
    case Api::kTorchSegmentMap:
      return a.alloc && a.mapping && a.addr >= history.addr && a.addr + a.size == history.addr + history.size;
    case Api::kTorchSegmentUnmap:
      return !a.alloc && a.mapping && a.addr >= history.addr && a.addr < history.addr + history.size;
    default: return false;
  }
}

// PyTorch 2.1 keeps no times: each event goes just after the one before it, a segment at the
// recorded call that reserved or released its memory (the earliest one not before).
void place_untimed(std::vector<Event>& events, const std::vector<Anchor>& anchors) {
  std::map<int32_t, uint64_t> last;  // per device
  for (Event& e : events) {
    if (e.t_ns != kUntimedEvent) continue;
    uint64_t& t = last[e.device];
    auto hit =
        std::find_if(anchors.begin(), anchors.end(), [&](const Anchor& a) { return a.t_ns >= t && anchored_by(e, a); });
    t = hit != anchors.end() ? hit->t_ns + 1 : t + 1;
    e.t_ns = t;
  }
}

std::string read_file(const std::string& path, bool& ok) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  ok = static_cast<bool>(in) || in.eof();
  return bytes.str();
}

// Copies a recorded event's stack and name into WRITER.
class Remap {
 public:
  Remap(const TraceReader& reader, TraceWriter& writer) : reader_(reader), writer_(writer) {}
  void apply(Event& e) {
    if (e.stack_id) e.stack_id = stack(e.stack_id);
    if (api_info(e.api).aux == AuxField::kName && e.name) e.name = writer_.intern_string(reader_.string(e.name));
  }

 private:
  uint64_t stack(uint64_t id) {
    auto [it, fresh] = stacks_.try_emplace(id, 0);
    if (!fresh) return it->second;
    std::vector<uint64_t> frames;
    if (const std::vector<uint64_t>* ids = reader_.stack(id))
      for (uint64_t f : *ids) frames.push_back(frame(f));
    it->second = writer_.intern_stack(frames, reader_.stack_flags(id));
    return it->second;
  }
  uint64_t frame(uint64_t id) {
    auto [it, fresh] = frames_.try_emplace(id, 0);
    if (!fresh) return it->second;
    FrameInfo info;
    if (const pb::Frame* f = reader_.frame(id)) {
      info.python = f->frame_kind() == 1;
      info.address = f->address();
      info.module = reader_.string(f->module());
      info.offset = f->offset();
      info.function = reader_.string(f->function());
      info.file = reader_.string(f->file());
      info.line = f->line();
      info.inlined = f->inlined();
    }
    it->second = writer_.intern_frame(info);
    return it->second;
  }
  const TraceReader& reader_;
  TraceWriter& writer_;
  std::unordered_map<uint64_t, uint64_t> stacks_, frames_;
};

}  // namespace

bool merge_torch_history(const std::string& trace_path, const std::vector<std::string>& readings, std::string& error) {
  if (readings.empty()) return true;
  std::unique_ptr<TraceReader> reader = TraceReader::open(trace_path, error);
  if (!reader) return false;
  struct stat st {};
  unsigned mode = ::stat(trace_path.c_str(), &st) == 0 ? st.st_mode & 07777 : 0600;
  const std::string merged_path = trace_path + ".merging";
  std::filesystem::remove(merged_path);
  std::unique_ptr<TraceWriter> writer = TraceWriter::create(merged_path, error, 1, mode);
  if (!writer) return false;
  writer->write_header(reader->header());
  int devices_written = reader->header().devices_size();  // the rest follow the header, as read

  std::vector<Event> history;
  bool wrapped = false, untimed = false;
  for (const std::string& path : readings) {
    bool ok = false;
    std::string bytes = read_file(path, ok);
    TorchHistoryReading reading;
    if (!ok ||
        !read_torch_history(bytes, path, reader->header().origin_monotonic_ns(), *writer, history, reading, error)) {
      if (!ok) error = path + ": cannot be read";
      std::filesystem::remove(merged_path);
      return false;
    }
    wrapped |= reading.ring_wrapped;
    untimed |= reading.untimed;
  }
  if (untimed) {  // a first pass over the trace for the calls that place the segments
    std::unique_ptr<TraceReader> first = TraceReader::open(trace_path, error);
    if (!first) return false;
    std::vector<Anchor> anchors;
    for (Event e; first->next(e);)
      if (e.layer == Layer::kReserved && e.ok() && e.op() != Op::kMark &&
          (counts_as_device_memory(e.kind) || e.kind == MemKind::kVmmMapping))
        anchors.push_back({e.t_ns, e.addr, e.size, e.op() == Op::kAlloc, e.kind == MemKind::kVmmMapping});
    place_untimed(history, anchors);
  }
  std::stable_sort(history.begin(), history.end(), [](const Event& a, const Event& b) { return a.t_ns < b.t_ns; });

  Remap remap(*reader, *writer);
  size_t next = 0;
  for (Event e; reader->next(e);) {
    for (; devices_written < reader->header().devices_size(); ++devices_written)
      writer->add_device(reader->header().devices(devices_written));
    for (; next < history.size() && history[next].t_ns <= e.t_ns; ++next) writer->add(history[next]);
    remap.apply(e);
    writer->add(e);
  }
  for (; next < history.size(); ++next) writer->add(history[next]);
  for (; devices_written < reader->header().devices_size(); ++devices_written)
    writer->add_device(reader->header().devices(devices_written));
  pb::Footer footer = reader->footer().value_or(pb::Footer());
  footer.add_notices(std::to_string(history.size()) + " events of PyTorch's allocator came from its own recorder, " +
                     std::to_string(readings.size()) + " reading" + (readings.size() > 1 ? "s" : "") +
                     " merged at the end" +
                     (wrapped ? "; its ring went round between readings, and the events it dropped are missing "
                                "(MEMTRACE_TORCH_HISTORY_ENTRIES keeps more)"
                              : ""));
  if (untimed)
    footer.add_notices(
        "this PyTorch keeps no times in its recorder (2.1): its events are placed by the segments they share with "
        "the recorded cudaMalloc and cudaFree calls, the others just after the one before them");
  writer->finish(footer);
  if (writer->failed()) {
    error = writer->error();
    std::filesystem::remove(merged_path);
    return false;
  }
  std::error_code ec;
  std::filesystem::rename(merged_path, trace_path, ec);
  if (ec) {
    error = trace_path + ": " + ec.message();
    return false;
  }
  for (const std::string& path : readings) std::filesystem::remove(path, ec);
  return true;
}

}  // namespace memtrace
