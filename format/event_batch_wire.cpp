#include "event_batch_wire.h"

#include <cstring>

#include "memtrace/format/framing.h"
#include "memtrace/format/varint.h"

namespace memtrace {

namespace {

// EventBatch's fields (memtrace.proto), by number.
enum Field {
  kCountField = 1,
  kTimeDelta,
  kTid,
  kApiField,
  kKindField,
  kLayerField,
  kDeviceField,
  kStream,
  kAddrDelta,
  kSize,
  kAux,
  kResult,
  kStackId,
  kDeviceFree,
  kDeviceTotal,
  kFlags,
  kFreed,
  kFieldsEnd,
};

// Puts column FIELD's values into events E[0..N). VALUES gives them one after the other, as
// protobuf types the field: u32(), u64(), s32() or s64(). Columns go in field order (the aux
// column's meaning depends on the event's API); the freed column's values go to FREED (N of them),
// resolved once the batch is whole. Returns N, or the index of the first event that names a stack
// at or above STACK_COUNT.
template <typename Values>
int put_column(int field, Event* e, int n, uint64_t stack_count, Values& v, uint64_t* freed) {
  switch (field) {
    case kTimeDelta: {
      uint64_t t = 0;
      for (int i = 0; i < n; ++i) e[i].t_ns = t += static_cast<uint64_t>(v.s64());
      break;
    }
    case kTid:
      for (int i = 0; i < n; ++i) e[i].tid = v.u32();
      break;
    case kApiField:
      for (int i = 0; i < n; ++i) {
        uint32_t api = v.u32();
        e[i].api = api < static_cast<uint32_t>(Api::kCount) ? static_cast<Api>(api) : Api::kUnknown;
      }
      break;
    case kKindField:
      for (int i = 0; i < n; ++i) {
        uint32_t kind = v.u32();
        e[i].kind = kind < static_cast<uint32_t>(MemKind::kCount) ? static_cast<MemKind>(kind) : MemKind::kUnknown;
      }
      break;
    case kLayerField:
      for (int i = 0; i < n; ++i) {
        uint32_t layer = v.u32();
        e[i].layer = layer <= 3 ? static_cast<Layer>(layer) : Layer::kUnknown;
      }
      break;
    case kDeviceField:
      for (int i = 0; i < n; ++i) e[i].device = v.s32();
      break;
    case kStream:
      for (int i = 0; i < n; ++i) e[i].stream = v.u64();
      break;
    case kAddrDelta: {
      uint64_t addr = 0;
      for (int i = 0; i < n; ++i) e[i].addr = addr += static_cast<uint64_t>(v.s64());
      break;
    }
    case kSize:
      for (int i = 0; i < n; ++i) e[i].size = v.u64();
      break;
    case kAux:
      for (int i = 0; i < n; ++i) set_aux_value(e[i], v.u64());  // into the field the event's API names
      break;
    case kResult:
      for (int i = 0; i < n; ++i) e[i].result = v.s32();
      break;
    case kStackId:
      for (int i = 0; i < n; ++i)
        if ((e[i].stack_id = v.u64()) >= stack_count) return i;
      break;
    case kDeviceFree:
      for (int i = 0; i < n; ++i) e[i].device_free = v.u64();
      break;
    case kDeviceTotal:
      for (int i = 0; i < n; ++i) e[i].device_total = v.u64();
      break;
    case kFlags:
      for (int i = 0; i < n; ++i) e[i].flags = v.u32();
      break;
    case kFreed:
      for (int i = 0; i < n; ++i) freed[i] = v.u64();
      break;
    default: break;
  }
  return n;
}

// A column of a parsed message, one value after the other.
template <typename T>
struct MessageValues {
  const google::protobuf::RepeatedField<T>* column;
  int i = 0;
  uint32_t u32() { return static_cast<uint32_t>(column->Get(i++)); }
  uint64_t u64() { return static_cast<uint64_t>(column->Get(i++)); }
  int32_t s32() { return static_cast<int32_t>(column->Get(i++)); }
  int64_t s64() { return static_cast<int64_t>(column->Get(i++)); }
};

// A packed column's bytes, one varint after the other. A value protobuf would read otherwise than
// as written (a varint running past the column, longer than ten bytes or beyond 64 bits; a 32-bit
// field's value beyond 32 bits) marks it bad: the batch is then left to protobuf.
struct WireValues {
  const unsigned char* p;
  const unsigned char* end;
  bool bad = false;

  uint64_t u64() {
    if (end - p >= 10) {  // the longest varint fits: no bound to check byte by byte
      uint64_t value = *p++;
      if (value < 0x80) return value;  // most values: one byte
      value -= 0x80;
      for (int shift = 7; shift < 63; shift += 7) {
        const uint64_t byte = *p++;
        value += byte << shift;
        if (byte < 0x80) return value;
        value -= uint64_t{0x80} << shift;
      }
      if (*p <= 1) return value + (uint64_t{*p++} << 63);
      bad = true;
      return 0;
    }
    return u64_near_end();
  }
  uint64_t u64_near_end() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p == end || (shift == 63 && *p > 1)) break;
      const unsigned char byte = *p++;
      value |= static_cast<uint64_t>(byte & 0x7F) << shift;
      if (!(byte & 0x80)) return value;
    }
    bad = true;
    return 0;
  }
  uint32_t u32() {
    uint64_t value = u64();
    if (value >> 32) bad = true;
    return static_cast<uint32_t>(value);
  }
  int32_t s32() { return static_cast<int32_t>(unzigzag(u32())); }
  int64_t s64() { return unzigzag(u64()); }
};

// The most bytes a column of N values takes, tag and length included.
inline size_t column_room(size_t n) { return 3 + varint_bytes(10 * n) + 10 * n; }

// Writes column FIELD, packed, at P: its tag, its length, then VALUE(i) for each event. The
// values go where the longest length would leave them, and move down when the length is shorter.
template <typename Value>
unsigned char* put_packed(unsigned char* p, uint32_t field, size_t n, Value&& value) {
  p = put_varint(p, field << 3 | 2);
  unsigned char* const values = p + varint_bytes(10 * n);
  unsigned char* end = values;
  for (size_t i = 0; i < n; ++i) end = put_varint(end, value(i));
  const size_t length = static_cast<size_t>(end - values);
  unsigned char* const moved = put_varint(p, length);
  if (moved != values) std::memmove(moved, values, length);
  return moved + length;
}

}  // namespace

unsigned char* wrap_as_events_chunk(unsigned char* batch, size_t batch_bytes) {
  constexpr uint32_t kChunkEvents = 5;  // Chunk.events (memtrace.proto)
  unsigned char head[kEventsChunkRoom];
  unsigned char* end = put_varint(put_varint(head, kChunkEvents << 3 | 2), batch_bytes);
  const size_t head_bytes = static_cast<size_t>(end - head);
  std::memcpy(batch - head_bytes, head, head_bytes);
  return batch - head_bytes;
}

size_t event_batch_bound(size_t n) { return 11 + (kFieldsEnd - kTimeDelta) * column_room(n); }

size_t encode_event_batch(const Event* e, size_t n, const uint64_t* freed, unsigned char* const out) {
  if (n == 0) return 0;  // a count of 0 is no field at all
  bool any_stream = false, any_aux = false, any_stack = false, any_result = false, any_layer = false,
       any_memory = false, any_flags = false, any_freed = false;
  for (size_t i = 0; i < n; ++i) {
    any_stream |= e[i].stream != 0;
    any_aux |= aux_value(e[i]) != 0;
    any_stack |= e[i].stack_id != 0;
    any_result |= e[i].result != 0;
    any_layer |= e[i].layer != Layer::kReserved;  // an absent layer column means "reserved"
    any_memory |= e[i].device_total != 0 || e[i].device_free != 0;
    any_flags |= e[i].flags != 0;
    any_freed |= freed && freed[i] != 0;
  }
  unsigned char* p = put_varint(out, kCountField << 3 | 0);
  p = put_varint(p, n);
  uint64_t prev_t = 0;
  p = put_packed(p, kTimeDelta, n, [&](size_t i) {
    const uint64_t delta = zigzag(static_cast<int64_t>(e[i].t_ns - prev_t));
    prev_t = e[i].t_ns;
    return delta;
  });
  p = put_packed(p, kTid, n, [&](size_t i) { return e[i].tid; });
  p = put_packed(p, kApiField, n, [&](size_t i) { return static_cast<uint32_t>(e[i].api); });
  p = put_packed(p, kKindField, n, [&](size_t i) { return static_cast<uint32_t>(e[i].kind); });
  if (any_layer) p = put_packed(p, kLayerField, n, [&](size_t i) { return static_cast<uint32_t>(e[i].layer); });
  p = put_packed(p, kDeviceField, n, [&](size_t i) { return zigzag(e[i].device); });
  if (any_stream) p = put_packed(p, kStream, n, [&](size_t i) { return e[i].stream; });
  uint64_t prev_addr = 0;
  p = put_packed(p, kAddrDelta, n, [&](size_t i) -> uint64_t {
    if (any_freed && freed[i] >= 2) return 0;  // the reader takes it from the allocation freed
    const uint64_t delta = zigzag(static_cast<int64_t>(e[i].addr - prev_addr));
    prev_addr = e[i].addr;
    return delta;
  });
  p = put_packed(p, kSize, n, [&](size_t i) { return e[i].size; });
  if (any_aux) p = put_packed(p, kAux, n, [&](size_t i) { return aux_value(e[i]); });
  if (any_result) p = put_packed(p, kResult, n, [&](size_t i) { return zigzag(e[i].result); });
  if (any_stack) p = put_packed(p, kStackId, n, [&](size_t i) { return e[i].stack_id; });
  if (any_memory) {
    p = put_packed(p, kDeviceFree, n, [&](size_t i) { return e[i].device_free; });
    p = put_packed(p, kDeviceTotal, n, [&](size_t i) { return e[i].device_total; });
  }
  if (any_flags) p = put_packed(p, kFlags, n, [&](size_t i) { return e[i].flags; });
  if (any_freed) p = put_packed(p, kFreed, n, [&](size_t i) { return freed[i]; });
  return static_cast<size_t>(p - out);
}

std::string decode_event_batch(const pb::EventBatch& b, uint64_t stack_count, std::vector<Event>& out,
                               std::vector<uint64_t>* freed) {
  if (b.count() > framing::kMaxBatchEvents)
    return "event batch of " + std::to_string(b.count()) + " events exceeds the limit of " +
           std::to_string(framing::kMaxBatchEvents);
  const int n = static_cast<int>(b.count());
  auto column_ok = [n](int size) { return size == 0 || size == n; };
  if (!column_ok(b.time_delta_size()) || !column_ok(b.tid_size()) || !column_ok(b.api_size()) ||
      !column_ok(b.kind_size()) || !column_ok(b.layer_size()) || !column_ok(b.device_size()) ||
      !column_ok(b.stream_size()) || !column_ok(b.addr_delta_size()) || !column_ok(b.size_size()) ||
      !column_ok(b.aux_size()) || !column_ok(b.result_size()) || !column_ok(b.stack_id_size()) ||
      !column_ok(b.device_free_size()) || !column_ok(b.device_total_size()) || !column_ok(b.flags_size()) ||
      !column_ok(b.freed_size())) {
    return "event batch columns disagree with its count of " + std::to_string(n);
  }
  if (b.freed_size() > 0 && !freed) return "a snapshot's event batch frees by reference";
  if (freed) freed->assign(static_cast<size_t>(b.freed_size()), 0);
  // Column by column: each loop is one field over the whole batch.
  out.assign(static_cast<size_t>(n), Event());
  Event* e = out.data();
  int unknown_stack = n;
  auto put = [&](int field, const auto& column) {
    if (column.empty() || unknown_stack < n) return;
    MessageValues<typename std::decay_t<decltype(column)>::value_type> values{&column};
    unknown_stack = put_column(field, e, n, stack_count, values, freed ? freed->data() : nullptr);
  };
  put(kTimeDelta, b.time_delta());
  put(kTid, b.tid());
  put(kApiField, b.api());
  put(kKindField, b.kind());
  put(kLayerField, b.layer());
  put(kDeviceField, b.device());
  put(kStream, b.stream());
  put(kAddrDelta, b.addr_delta());
  put(kSize, b.size());
  put(kAux, b.aux());
  put(kResult, b.result());
  put(kStackId, b.stack_id());
  put(kDeviceFree, b.device_free());
  put(kDeviceTotal, b.device_total());
  put(kFlags, b.flags());
  put(kFreed, b.freed());
  if (unknown_stack < n)
    return "event " + std::to_string(unknown_stack) + " names unknown stack " +
           std::to_string(e[unknown_stack].stack_id);
  return {};
}

bool decode_event_batch_as_written(const unsigned char* bytes, size_t size, uint64_t stack_count,
                                   std::vector<Event>& out, std::vector<uint64_t>& freed) {
  const unsigned char* p = bytes;
  const unsigned char* const end = bytes + size;
  freed.clear();
  if (p == end) {  // a count of 0 is no field at all (proto3 leaves defaults out)
    out.clear();
    return true;
  }
  // The count: its tag, then a varint.
  if (*p++ != ((kCountField << 3) | 0)) return false;
  WireValues count{p, end};
  const uint64_t n = count.u64();
  if (count.bad || n > framing::kMaxBatchEvents) return false;
  p = count.p;
  out.assign(static_cast<size_t>(n), Event());
  for (int last = kCountField; p < end;) {
    // A column: its tag (field number, length-delimited) in one or two bytes, its length, its
    // values. Each field at most once, in order.
    WireValues tag{p, end};
    const uint64_t t = tag.u64();
    const uint64_t field = t >> 3;
    if (tag.bad || (t & 7) != 2 || field <= static_cast<uint64_t>(last) || field >= kFieldsEnd) return false;
    WireValues length{tag.p, end};
    const uint64_t bytes_long = length.u64();
    if (length.bad || bytes_long > static_cast<uint64_t>(end - length.p)) return false;
    WireValues values{length.p, length.p + bytes_long};
    if (field == kFreed) freed.resize(static_cast<size_t>(n));
    if (put_column(static_cast<int>(field), out.data(), static_cast<int>(n), stack_count, values, freed.data()) <
            static_cast<int>(n) ||
        values.bad || values.p != values.end)
      return false;
    last = static_cast<int>(field);
    p = values.end;
  }
  return true;
}

}  // namespace memtrace
