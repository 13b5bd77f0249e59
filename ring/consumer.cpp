#include "memtrace/ring/consumer.h"

#include <cstring>

namespace memtrace {

RingEvent ring_event_of(const ring::EventRecord& rec, uint64_t index) {
  RingEvent e;
  e.seq = rec.seq;
  e.python_state = rec.python_state;
  e.stack_truncated = rec.stack_flags & ring::kStackTruncated;
  e.stack_kept = rec.stack_flags & ring::kStackKept;
  e.native_reused = rec.native_reused;
  e.python_reused = rec.python_reused;
  e.ring_index = index;
  e.event = rec.event;
  return e;
}

// Gathers the record's payload and hands it on. Everything in it comes from the traced
// process's memory: sizes are checked against what the slots can hold.
bool RingConsumer::deliver(const unsigned char* first, uint32_t slots, uint64_t tail, RecordSink& sink) {
  payload_.resize((slots - 1) * ring::kContinuationBytes);
  for (uint32_t i = 1; i < slots; ++i)
    std::memcpy(payload_.data() + (i - 1) * ring::kContinuationBytes, ring::slot_at(ring_, tail + i) + 8,
                ring::kContinuationBytes);
  const size_t available = payload_.size();
  const auto* words = reinterpret_cast<const uint64_t*>(payload_.data());
  switch (ring::state_type(reinterpret_cast<const std::atomic<uint32_t>*>(first)->load(std::memory_order_relaxed))) {
    case ring::kSlotEvent: {
      const auto* rec = reinterpret_cast<const ring::EventRecord*>(first);
      size_t natives = rec->native_frames, pythons = rec->python_frames, name_bytes = rec->name_bytes;
      size_t words_bytes = (natives + 2 * pythons) * sizeof(uint64_t);
      if (words_bytes + name_bytes > available || name_bytes > ring::kMaxNameBytes) return false;
      RingEvent e = ring_event_of(*rec, tail);
      std::string_view name(reinterpret_cast<const char*>(words) + words_bytes, name_bytes);
      sink.on_event(e, words, natives, words + natives, pythons, name);
      return true;
    }
    case ring::kSlotModule: {
      const auto* rec = reinterpret_cast<const ring::ModuleRecord*>(first);
      if (rec->path_bytes > available) return false;
      sink.on_module(rec->bias, rec->start, rec->end,
                     std::string(reinterpret_cast<const char*>(words), rec->path_bytes));
      return true;
    }
    case ring::kSlotCode: {
      const auto* rec = reinterpret_cast<const ring::CodeRecord*>(first);
      if (size_t(rec->name_bytes) + rec->file_bytes + rec->table_bytes > available ||
          rec->table_format > static_cast<uint8_t>(python::LineTable::kLocations))
        return false;
      const char* text = reinterpret_cast<const char*>(words);
      CodeDescription code;
      code.id = rec->code;
      code.name.assign(text, rec->name_bytes);
      code.file.assign(text + rec->name_bytes, rec->file_bytes);
      code.first_line = rec->first_line;
      code.format = static_cast<python::LineTable>(rec->table_format);
      code.table.assign(text + rec->name_bytes + rec->file_bytes, rec->table_bytes);
      sink.on_code(std::move(code));
      return true;
    }
    case ring::kSlotStarted: {
      const auto* rec = reinterpret_cast<const ring::StartedRecord*>(first);
      sink.on_started(rec->tid, rec->api, rec->t_ns);
      return true;
    }
    case ring::kSlotNotice: {
      const auto* rec = reinterpret_cast<const ring::NoticeRecord*>(first);
      if (rec->text_bytes > available) return false;
      sink.on_notice(std::string(reinterpret_cast<const char*>(words), rec->text_bytes));
      return true;
    }
    case ring::kSlotDevices: {
      const auto* rec = reinterpret_cast<const ring::DevicesRecord*>(first);
      size_t at = 0;
      const char* bytes = reinterpret_cast<const char*>(words);
      for (uint32_t i = 0; i < rec->count; ++i) {
        ring::DeviceEntry entry;
        if (at + sizeof entry > available) return false;
        std::memcpy(&entry, bytes + at, sizeof entry);
        at += sizeof entry;
        if (entry.name_bytes > available - at) return false;
        sink.on_device(entry.ordinal, std::string(bytes + at, entry.name_bytes), entry.total_bytes, entry.uuid);
        at += entry.name_bytes;
      }
      return true;
    }
    default: return false;
  }
}

RingConsumer::Drained RingConsumer::drain(RecordSink& sink, bool producer_gone, size_t max_taken) {
  ring::RingHeader* h = ring_.header;
  const uint64_t slots = ring_.data_bytes / ring::kSlotBytes;
  uint64_t tail = tail_;  // ours: the header's copy is only for the producers to read
  // While the process lives, published slots say where records are; head (which producers keep
  // writing) is read only to step over what a dead process left. Never further than one ring:
  // the header is the traced process's memory.
  uint64_t head = producer_gone ? h->head.load(std::memory_order_acquire) : tail + slots;
  if (head - tail > slots) head = tail + slots;
  size_t events = 0, taken = 0;
  unsigned char first[ring::kSlotBytes];
  while (tail < head && taken < max_taken) {
    auto* state = reinterpret_cast<std::atomic<uint32_t>*>(ring::slot_at(ring_, tail));
    uint32_t s = state->load(std::memory_order_acquire);
    uint32_t type = ring::state_type(s), n = ring::state_slots(s);
    bool record = type == ring::kSlotEvent || type == ring::kSlotModule || type == ring::kSlotCode ||
                  type == ring::kSlotDevices || type == ring::kSlotStarted || type == ring::kSlotNotice;
    if (record && n >= 1 && n <= head - tail) {
      std::memcpy(first, ring::slot_at(ring_, tail), ring::kSlotBytes);
      if (!deliver(first, n, tail, sink))
        ++malformed_;
      else if (type == ring::kSlotEvent)
        ++events;
      for (uint32_t i = 0; i < n; ++i)
        reinterpret_cast<std::atomic<uint32_t>*>(ring::slot_at(ring_, tail + i))
            ->store(ring::kSlotFree, std::memory_order_relaxed);
      tail += n;
    } else if (producer_gone) {
      state->store(ring::kSlotFree, std::memory_order_relaxed);
      if (type != ring::kSlotContinuation) ++incomplete_;
      tail += 1;
    } else {
      break;  // a writer is still filling this slot
    }
    if ((++taken & 63) == 0) h->tail.store(tail, std::memory_order_release);
  }
  h->tail.store(tail, std::memory_order_release);
  tail_ = tail;
  return {events, taken};
}

std::vector<CallInProgress> RingConsumer::calls_in_progress() const {
  std::vector<CallInProgress> calls;
  for (const auto& slot : ring_.header->in_calls) {
    CallInProgress call;
    call.tid = slot.tid.load(std::memory_order_acquire);
    uint32_t api = slot.api.load(std::memory_order_acquire);
    if (call.tid == 0 || api == 0 || api > UINT16_MAX) continue;
    call.api = static_cast<uint16_t>(api - 1);
    call.seq = slot.seq.load(std::memory_order_acquire);
    call.t_ns = call.seq ? slot.t_ns.load(std::memory_order_acquire) : 0;
    calls.push_back(call);
  }
  return calls;
}

std::unordered_map<uint32_t, uint64_t> RingConsumer::thread_drops() const {
  std::unordered_map<uint32_t, uint64_t> drops;
  for (const auto& slot : ring_.header->thread_drops) {
    uint32_t tid = slot.tid.load(std::memory_order_acquire);
    uint64_t t_ns = slot.t_ns.load(std::memory_order_acquire);
    if (tid != 0 && t_ns != 0) drops[tid] = t_ns;
  }
  return drops;
}

void RingConsumer::take_dropped(std::vector<uint64_t>& out) {
  ring::RingHeader* h = ring_.header;
  uint64_t count = h->dropped_log_count.load(std::memory_order_acquire);
  if (count > ring::kDroppedLogSize) count = ring::kDroppedLogSize;
  for (; dropped_taken_ < count; ++dropped_taken_) {
    uint64_t entry = h->dropped_log[dropped_taken_].load(std::memory_order_acquire);
    if (entry == 0) break;  // claimed, not yet written: next time
    out.push_back(entry - 1);
  }
}

}  // namespace memtrace
