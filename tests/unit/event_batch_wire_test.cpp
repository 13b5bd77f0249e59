// The reader decodes event batches straight from their bytes (format/event_batch_wire.h): every
// batch must come out as protobuf's parse of it decodes, and whatever is not written as memtrace
// writes it must be left to protobuf.
#include "event_batch_wire.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "memtrace/format/framing.h"
#include "memtrace/format/freed_references.h"
#include "memtrace/format/trace_writer.h"

namespace memtrace {
namespace {

// What the reader makes of a batch's bytes: decoded from them, or else parsed by protobuf.
struct Decoded {
  bool parses = true;
  std::string problem;
  std::vector<Event> events;
  std::vector<uint64_t> freed;
};

Decoded as_protobuf_reads_it(const std::string& bytes, uint64_t stack_count) {
  Decoded d;
  pb::EventBatch batch;
  d.parses = batch.ParseFromString(bytes);
  if (d.parses) d.problem = decode_event_batch(batch, stack_count, d.events, &d.freed);
  return d;
}

Decoded as_the_reader_reads_it(const std::string& bytes, uint64_t stack_count) {
  Decoded d;
  if (decode_event_batch_as_written(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), stack_count,
                                    d.events, d.freed))
    return d;
  return as_protobuf_reads_it(bytes, stack_count);
}

void expect_same(const Decoded& a, const Decoded& b, const std::string& what) {
  EXPECT_EQ(a.parses, b.parses) << what;
  EXPECT_EQ(a.problem, b.problem) << what;
  if (!a.parses || !a.problem.empty()) return;  // a failed decode's events are not read
  ASSERT_EQ(a.events.size(), b.events.size()) << what;
  EXPECT_EQ(a.freed, b.freed) << what;
  for (size_t i = 0; i < a.events.size(); ++i)
    ASSERT_EQ(0, std::memcmp(&a.events[i], &b.events[i], sizeof(Event))) << what << ": event " << i;
}

std::vector<Event> random_events(std::mt19937_64& rng, size_t n) {
  std::vector<Event> events(n);
  uint64_t t = 0;
  for (Event& e : events) {
    auto pick = [&](uint64_t limit) { return rng() % limit; };
    // Small and large values alike: one-byte varints, ten-byte ones, negative deltas.
    auto any = [&] { return pick(3) == 0 ? rng() : rng() >> (pick(64)); };
    e.t_ns = t += pick(4) == 0 ? any() : pick(1000);
    e.tid = static_cast<uint32_t>(any());
    e.api = static_cast<Api>(pick(static_cast<uint64_t>(Api::kCount)));
    e.kind = static_cast<MemKind>(pick(static_cast<uint64_t>(MemKind::kCount)));
    e.layer = static_cast<Layer>(pick(4));
    e.device = static_cast<int32_t>(any());
    e.stream = pick(2) ? any() : 0;
    e.addr = any();
    e.size = any();
    set_aux_value(e, any());
    e.result = pick(4) == 0 ? static_cast<int32_t>(any()) : 0;
    e.stack_id = pick(100);
    if (pick(10) == 0) {
      e.device_free = any();
      e.device_total = any();
    }
    e.flags = static_cast<uint32_t>(pick(4));
  }
  return events;
}

// Successful allocations, each freed by a later event some of the time (the freed column).
std::vector<Event> allocations_and_frees(std::mt19937_64& rng, size_t n) {
  std::vector<Event> events = random_events(rng, n);
  std::vector<Event> live;
  for (Event& e : events) {
    e.result = 0;
    if (!live.empty() && rng() % 2) {
      const size_t at = rng() % live.size();
      e.api = Api::kCudaFree;
      e.addr = live[at].addr;
      e.layer = live[at].layer;
      e.kind = live[at].kind;
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(at));
    } else {
      e.api = Api::kCudaMalloc;
      live.push_back(e);
    }
  }
  return events;
}

// Every event's optional columns at their defaults: the columns are left out.
void clear_optional_columns(std::vector<Event>& events) {
  for (Event& e : events) {
    e.stream = e.result = e.flags = 0;
    e.stack_id = e.device_free = e.device_total = 0;
    e.layer = Layer::kReserved;
    set_aux_value(e, 0);
  }
}

// The batch through protobuf's own message: each column filled value by value, serialized by
// protobuf. What memtrace's encoder (encode_event_batch) must write byte for byte.
std::string serialized_by_protobuf(const std::vector<Event>& events, const std::vector<uint64_t>& freed) {
  pb::EventBatch b;
  b.set_count(static_cast<uint32_t>(events.size()));
  bool stream = false, aux = false, stack = false, result = false, layer = false, memory = false, flags = false,
       any_freed = false;
  for (size_t i = 0; i < events.size(); ++i) {
    const Event& e = events[i];
    stream |= e.stream != 0;
    aux |= aux_value(e) != 0;
    stack |= e.stack_id != 0;
    result |= e.result != 0;
    layer |= e.layer != Layer::kReserved;
    memory |= e.device_total != 0 || e.device_free != 0;
    flags |= e.flags != 0;
    any_freed |= !freed.empty() && freed[i] != 0;
  }
  uint64_t t = 0, addr = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    const Event& e = events[i];
    b.add_time_delta(static_cast<int64_t>(e.t_ns - t));
    t = e.t_ns;
    b.add_tid(e.tid);
    b.add_api(static_cast<uint32_t>(e.api));
    b.add_kind(static_cast<uint32_t>(e.kind));
    if (layer) b.add_layer(static_cast<uint32_t>(e.layer));
    b.add_device(e.device);
    if (stream) b.add_stream(e.stream);
    if (any_freed && freed[i] >= 2) {
      b.add_addr_delta(0);
    } else {
      b.add_addr_delta(static_cast<int64_t>(e.addr - addr));
      addr = e.addr;
    }
    b.add_size(e.size);
    if (aux) b.add_aux(aux_value(e));
    if (result) b.add_result(e.result);
    if (stack) b.add_stack_id(e.stack_id);
    if (memory) {
      b.add_device_free(e.device_free);
      b.add_device_total(e.device_total);
    }
    if (flags) b.add_flags(e.flags);
    if (any_freed) b.add_freed(freed[i]);
  }
  return b.SerializeAsString();
}

TEST(EventBatchWire, TheEncoderWritesTheBytesProtobufWrites) {
  std::mt19937_64 rng(11);
  for (size_t n : {0, 1, 2, 3, 15, 16, 100, 1000, 16384, 65536}) {
    for (int round = 0; round < 6; ++round) {
      std::vector<Event> events = round >= 3 ? allocations_and_frees(rng, n) : random_events(rng, n);
      if (round == 1 || round == 4) clear_optional_columns(events);
      std::vector<uint64_t> freed;
      if (round >= 3) {  // frees by reference, as the trace's writer names them
        FreedReferenceWriter references;
        for (const Event& e : events) freed.push_back(references.value(e));
      }
      if (round == 5) freed.assign(n, 0);  // a freed column of zeros is left out
      // Past the bound, a guard the encoder must leave alone.
      std::string bytes(event_batch_bound(n) + 8, '#');
      const size_t written = encode_event_batch(events.data(), n, freed.empty() ? nullptr : freed.data(),
                                                reinterpret_cast<unsigned char*>(bytes.data()));
      ASSERT_LE(written, event_batch_bound(n));
      EXPECT_EQ(bytes.substr(bytes.size() - 8), "########");
      EXPECT_TRUE(bytes.substr(0, written) == serialized_by_protobuf(events, freed)) << n << " events, round " << round;
    }
  }
}

TEST(EventBatchWire, AWrappedBatchIsTheChunkProtobufWrites) {
  std::mt19937_64 rng(13);
  for (size_t n : {1, 5, 100, 16384}) {  // lengths of one to three bytes
    std::vector<Event> events = random_events(rng, n);
    std::vector<unsigned char> buffer(kEventsChunkRoom + event_batch_bound(n));
    unsigned char* const batch = buffer.data() + kEventsChunkRoom;
    const size_t batch_bytes = encode_event_batch(events.data(), n, nullptr, batch);
    const unsigned char* chunk = wrap_as_events_chunk(batch, batch_bytes);
    ASSERT_GE(chunk, buffer.data());
    pb::Chunk expected;
    ASSERT_TRUE(expected.mutable_events()->ParseFromArray(batch, static_cast<int>(batch_bytes)));
    EXPECT_TRUE(std::string(reinterpret_cast<const char*>(chunk), batch + batch_bytes - chunk) ==
                expected.SerializeAsString())
        << n << " events";
  }
}

std::string serialized(const std::vector<Event>& events, FreedReferenceWriter* references = nullptr) {
  pb::EventBatch batch;
  TraceWriter::encode_events(events, batch, references);
  return batch.SerializeAsString();
}

TEST(EventBatchWire, BatchesAsMemtraceWritesThemAreReadFromTheirBytesAsProtobufReadsThem) {
  std::mt19937_64 rng(7);
  for (size_t n : {0, 1, 2, 3, 100, 1000, 65536}) {
    for (int round = 0; round < 5; ++round) {
      std::vector<Event> events = random_events(rng, n);
      if (round == 1) clear_optional_columns(events);
      FreedReferenceWriter references;
      if (round >= 3) events = allocations_and_frees(rng, n);  // the freed column, and gaps in addr's deltas
      const std::string bytes = serialized(events, round >= 3 ? &references : nullptr);
      Decoded direct;
      ASSERT_TRUE(decode_event_batch_as_written(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), 100,
                                                direct.events, direct.freed))
          << n << " events, round " << round;
      if (round >= 3 && n > 10) {
        EXPECT_FALSE(direct.freed.empty());
      }
      expect_same(direct, as_protobuf_reads_it(bytes, 100), std::to_string(n) + " events");
    }
  }
}

// A protobuf encoder by hand, for the encodings memtrace does not write.
void varint(std::string& out, uint64_t v) {
  for (; v >= 0x80; v >>= 7) out += static_cast<char>((v & 0x7F) | 0x80);
  out += static_cast<char>(v);
}
void tag(std::string& out, int field, int wire_type) { varint(out, static_cast<uint64_t>(field) << 3 | wire_type); }
void packed(std::string& out, int field, const std::vector<uint64_t>& values) {
  std::string body;
  for (uint64_t v : values) varint(body, v);
  tag(out, field, 2);
  varint(out, body.size());
  out += body;
}
std::string count(uint64_t n) {
  std::string out;
  tag(out, 1, 0);
  varint(out, n);
  return out;
}

TEST(EventBatchWire, EverythingElseIsLeftToProtobuf) {
  const std::vector<uint64_t> apis = {static_cast<uint64_t>(Api::kCudaMalloc), static_cast<uint64_t>(Api::kCudaFree)};
  const std::string three_columns = [&] {
    std::string s = count(2);
    packed(s, 2, {10, 4});  // time deltas, zigzag: 5, then 2 more
    packed(s, 4, apis);
    packed(s, 10, {4096, 0});  // sizes
    return s;
  }();
  struct Case {
    std::string what, bytes;
    bool as_written;  // whether the direct decoder takes it (else it must say no)
  };
  std::vector<Case> cases = {{"as memtrace writes it", three_columns, true}};
  auto add = [&](std::string what, std::string bytes) { cases.push_back({std::move(what), std::move(bytes), false}); };
  {
    std::string s;
    packed(s, 4, apis);
    add("count after a column", s + count(2));
  }
  {
    std::string s = count(2);
    packed(s, 10, {4096, 0});
    packed(s, 4, apis);
    add("columns out of order", s);
  }
  {
    std::string s = count(2);
    for (uint64_t api : apis) {
      tag(s, 4, 0);
      varint(s, api);
    }
    add("an unpacked column", s);
  }
  {
    std::string s = count(2);
    packed(s, 4, {apis[0]});
    packed(s, 4, {apis[1]});
    add("a column split in two", s);
  }
  {
    std::string s = count(2);
    packed(s, 4, apis);
    packed(s, 4, apis);
    add("a column given twice", s);
  }
  {
    std::string s = three_columns;
    tag(s, 99, 0);
    varint(s, 5);
    add("an unknown field", s);
  }
  {
    std::string s = count(2);
    packed(s, 3, {1ull << 33, 1});
    add("a 32-bit column's value beyond 32 bits", s);
  }
  {
    std::string s = count(2);
    packed(s, 4, {apis[0]});
    add("a column shorter than the count", s);
  }
  {
    std::string s = count(1);
    packed(s, 4, apis);
    add("a column longer than the count", s);
  }
  {
    std::string s = count(2);
    tag(s, 4, 2);
    varint(s, 0);
    add("an empty column", s);
  }
  {
    std::string s = count(2);
    tag(s, 10, 2);
    varint(s, 12);
    s += std::string(11, '\x80') + '\x01';
    packed(s, 4, apis);
    add("an eleven-byte varint", s);
  }
  {
    std::string s = count(1);
    tag(s, 10, 2);
    varint(s, 10);
    s += std::string(9, '\xff') + '\x02';
    add("a varint beyond 64 bits", s);
  }
  {
    std::string s = count(2);
    tag(s, 10, 2);
    varint(s, 3);
    s += "\x80\x80";
    add("a column cut inside a varint", s);
  }
  add("a cut batch", three_columns.substr(0, three_columns.size() - 1));
  {
    std::string s = count(2);
    packed(s, 13, {1, 100});
    add("an unknown stack", s);
  }
  add("too many events", count(framing::kMaxBatchEvents + 1));
  for (const Case& c : cases) {
    std::vector<Event> out;
    std::vector<uint64_t> freed;
    EXPECT_EQ(c.as_written, decode_event_batch_as_written(reinterpret_cast<const unsigned char*>(c.bytes.data()),
                                                          c.bytes.size(), 100, out, freed))
        << c.what;
    expect_same(as_the_reader_reads_it(c.bytes, 100), as_protobuf_reads_it(c.bytes, 100), c.what);
  }
  // The ones protobuf reads differ from the batch as written only in their encoding.
  Decoded written = as_protobuf_reads_it(three_columns, 100);
  ASSERT_TRUE(written.parses && written.problem.empty());
  EXPECT_EQ(written.events[1].t_ns, 7u);
  EXPECT_EQ(written.events[0].api, Api::kCudaMalloc);
}

}  // namespace
}  // namespace memtrace
