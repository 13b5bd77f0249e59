#include "record_batch.h"

#include <cstring>

namespace memtrace {

void RecordBatch::on_event(RingEvent& event, const uint64_t* native, size_t native_count, const uint64_t* python,
                           size_t python_count, std::string_view name) {
  Event e{event,        words_.size(), static_cast<uint32_t>(native_count), static_cast<uint32_t>(python_count),
          text_.size(), name.size()};
  words_.insert(words_.end(), native, native + native_count);
  words_.insert(words_.end(), python, python + 2 * python_count);
  text_.append(name);
  entries_.emplace_back(e);
}

void RecordBatch::on_module(uint64_t bias, uint64_t start, uint64_t end, std::string path) {
  entries_.emplace_back(Module{bias, start, end, std::move(path)});
}

void RecordBatch::on_code(CodeDescription code) { entries_.emplace_back(std::move(code)); }

void RecordBatch::on_device(int32_t ordinal, std::string name, uint64_t total_bytes, const uint8_t (&uuid)[16]) {
  Device d{ordinal, total_bytes, std::move(name), {}};
  std::memcpy(d.uuid, uuid, sizeof d.uuid);
  entries_.emplace_back(std::move(d));
}

void RecordBatch::on_started(uint32_t tid, uint16_t api, uint64_t t_ns) {
  entries_.emplace_back(Started{tid, api, t_ns});
}

void RecordBatch::on_notice(std::string text) { entries_.emplace_back(Notice{std::move(text)}); }

void RecordBatch::replay(RecordSink& sink) {
  for (auto& entry : entries_) {
    if (auto* e = std::get_if<Event>(&entry)) {
      const uint64_t* words = words_.data() + e->words_at;
      sink.on_event(e->event, words, e->native_count, words + e->native_count, e->python_count,
                    std::string_view(text_).substr(e->name_at, e->name_bytes));
    } else if (auto* m = std::get_if<Module>(&entry)) {
      sink.on_module(m->bias, m->start, m->end, std::move(m->path));
    } else if (auto* c = std::get_if<CodeDescription>(&entry)) {
      sink.on_code(std::move(*c));
    } else if (auto* d = std::get_if<Device>(&entry)) {
      sink.on_device(d->ordinal, std::move(d->name), d->total_bytes, d->uuid);
    } else if (auto* s = std::get_if<Started>(&entry)) {
      sink.on_started(s->tid, s->api, s->t_ns);
    } else if (auto* n = std::get_if<Notice>(&entry)) {
      sink.on_notice(std::move(n->text));
    }
  }
}

void RecordBatch::clear() {
  entries_.clear();
  words_.clear();
  text_.clear();
  dropped.clear();
}

size_t RecordBatch::bytes() const {
  return entries_.size() * sizeof entries_[0] + words_.size() * sizeof(uint64_t) + text_.size() +
         dropped.size() * sizeof(uint64_t);
}

}  // namespace memtrace
