#include "memtrace/exports/export_jsonl.h"

#include <charconv>
#include <memory>
#include <queue>
#include <unordered_map>

#include "memtrace.pb.h"
#include "memtrace/engine/pass.h"
#include "memtrace/engine/stacks.h"
#include "memtrace/engine/trace_set.h"
#include "memtrace/format/trace_reader.h"
#include "memtrace/views/report_render.h"

namespace memtrace {

namespace {

struct Source {
  std::unique_ptr<TraceReader> reader;
  std::unique_ptr<StackView> stacks;
  std::unordered_map<uint64_t, std::string> stack_json_cache;  // stack id -> ,"stack":[...]
  PassDriver replay;  // no passes: each event is written as the merge reaches it
  Event next;
  bool has_next = false;
  void advance() { has_next = reader->next(next); }

  const std::string& stack_fields(uint64_t stack_id) {
    auto [it, fresh] = stack_json_cache.try_emplace(stack_id);
    if (fresh) {
      it->second = ",\"stack\":" + stack_json(stacks->frames(stack_id)).dump();
      uint32_t flags = stacks->flags(stack_id);
      if (flags & pb::STACK_PYTHON_NO_GIL) it->second += ",\"python_frames\":\"gil_not_held\"";
      if (flags & pb::STACK_TRUNCATED) it->second += ",\"stack_truncated\":true";
      if (flags & pb::STACK_NO_PYTHON_FRAMES) it->second += ",\"python_frames\":\"none\"";
    }
    return it->second;
  }
};

template <typename T>
void append_number(std::string& out, T value) {
  char text[24];
  auto [end, ec] = std::to_chars(text, text + sizeof text, value);
  out.append(text, end);
}

void append_event(std::string& out, int pid, const Event& e, const ReplayStep& step, Source& source) {
  out += "{\"t_ns\":";
  append_number(out, e.t_ns);
  out += ",\"pid\":";
  append_number(out, pid);
  out += ",\"tid\":";
  append_number(out, e.tid);
  out += ",\"api\":\"";
  out += api_name(e.api);
  out += "\",\"op\":\"";
  out += e.op() == Op::kAlloc ? "alloc" : e.op() == Op::kFree ? "free" : "mark";
  out += "\",\"kind\":\"";
  out += mem_kind_name(step.kind);
  out += "\",\"layer\":\"";
  out += layer_name(e.layer);
  out += "\",\"device\":";
  append_number(out, step.device);
  out += ",\"stream\":";
  append_number(out, e.stream);
  out += ",\"addr\":";
  append_number(out, e.addr);
  out += ",\"size\":";
  append_number(out, step.size);
  if (api_info(e.api).aux == AuxField::kHandle && e.op() == Op::kAlloc) {  // the physical handle, pool or graph
    out += ",\"handle\":";
    append_number(out, e.handle);
  }
  if (e.op() == Op::kMark) {  // an NVTX mark or range edge: its name (ranges: their id in addr)
    out += ",\"name\":";
    out += nlohmann::json(std::string(source.reader->string(e.name))).dump();
  } else if (e.layer == Layer::kAllocated && e.kind != MemKind::kHeap && e.op() == Op::kAlloc) {
    out += ",\"heap\":";
    append_number(out, e.heap);
  }
  out += ",\"result\":";
  append_number(out, e.result);
  if (e.interrupted()) out += ",\"interrupted\":true";
  if (e.captured()) out += ",\"captured\":true";                             // made while capturing a CUDA graph
  if (e.flags & kEventBeforeRecording) out += ",\"before_recording\":true";  // held when memtrace attached
  if (e.flags & kEventFromCupti) out += ",\"from_cupti\":true";  // recorded from CUPTI's callbacks, not an interposer
  if (e.op() == Op::kAlloc && e.stack_id) out += source.stack_fields(e.stack_id);
  out += "}\n";
}

}  // namespace

bool export_jsonl(const std::vector<std::string>& traces, std::FILE* out, bool keep_cuda_frames,
                  std::vector<std::string>& warnings, std::string& error) {
  std::vector<std::unique_ptr<Source>> sources;
  for (const auto& path : traces) {
    auto source = std::make_unique<Source>();
    source->reader = open_trace(path, error);
    if (!source->reader) return false;
    source->stacks = std::make_unique<StackView>(*source->reader, keep_cuda_frames);
    source->advance();
    sources.push_back(std::move(source));
  }
  // Merge by time; ties keep trace order, so the output is the same every run.
  auto later = [&](size_t a, size_t b) {
    const Event& x = sources[a]->next;
    const Event& y = sources[b]->next;
    return x.t_ns != y.t_ns ? x.t_ns > y.t_ns : a > b;
  };
  std::priority_queue<size_t, std::vector<size_t>, decltype(later)> queue(later);
  for (size_t i = 0; i < sources.size(); ++i)
    if (sources[i]->has_next) queue.push(i);
  std::string buffer;
  while (!queue.empty()) {
    size_t i = queue.top();
    queue.pop();
    Source& s = *sources[i];
    const ReplayStep& step = s.replay.feed(s.next);
    append_event(buffer, s.reader->header().pid(), s.next, step, s);
    if (buffer.size() > (1 << 16)) {
      std::fwrite(buffer.data(), 1, buffer.size(), out);
      buffer.clear();
    }
    s.advance();
    if (s.has_next) queue.push(i);
  }
  std::fwrite(buffer.data(), 1, buffer.size(), out);
  for (const auto& s : sources)
    if (!s->reader->footer() && !s->reader->problem().empty())
      warnings.push_back(s->reader->path() + ": " + s->reader->problem());
  if (std::fflush(out) != 0 || std::ferror(out)) {
    error = "cannot write the export";
    return false;
  }
  return true;
}

}  // namespace memtrace
