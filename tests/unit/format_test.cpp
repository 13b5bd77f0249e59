// The trace format: what is written reads back the same, and a cut or damaged file never
// crashes the reader: it reads what is whole or says what is wrong and where.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zstd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "crafted_chunk.h"
#include "memtrace/format/framing.h"
#include "memtrace/format/trace_reader.h"
#include "memtrace/format/trace_writer.h"

namespace {

namespace fs = std::filesystem;
using namespace memtrace;

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("memtrace-unit-" + std::to_string(::getpid()) + "-" + name)).string();
}

std::vector<Event> sample_events(size_t n) {
  std::vector<Event> events;
  std::mt19937_64 rng(42);
  uint64_t t = 1000;
  for (size_t i = 0; i < n; ++i) {
    Event e;
    t += rng() % 5000;
    e.t_ns = t;
    e.tid = 100 + static_cast<uint32_t>(rng() % 4);
    e.api = static_cast<Api>(1 + rng() % (static_cast<int>(Api::kCount) - 1));
    e.kind = api_info(e.api).kind;
    e.device = static_cast<int32_t>(rng() % 3) - 1;
    e.stream = (i % 7 == 0) ? rng() : 0;
    e.addr = 0x7f0000000000ull + (rng() % (1ull << 30));
    e.size = rng() % (1ull << 33);
    set_aux_value(e, (i % 11 == 0) ? rng() % 1000 : 0);
    e.result = (i % 13 == 0) ? 2 : 0;
    events.push_back(e);
  }
  return events;
}

std::string write_trace(const std::string& name, const std::vector<Event>& events, bool footer = true,
                        int compression = 1) {
  std::string path = temp_path(name);
  fs::remove(path);
  std::string error;
  auto writer = TraceWriter::create(path, error, compression);
  EXPECT_TRUE(writer) << error;
  pb::TraceHeader header;
  header.set_pid(1234);
  header.add_command("./train");
  header.add_command("--steps");
  writer->write_header(header);
  FrameInfo info;
  info.address = 0x401000;
  info.module = "/bin/train";
  info.offset = 0x1000;
  info.function = "train_step";
  uint64_t frame = writer->intern_frame(info);
  uint64_t stack = writer->intern_stack({frame});
  for (Event e : events) {
    e.stack_id = stack;
    writer->add(e);
  }
  if (footer) {
    pb::Footer f;
    f.set_exit_status(0);
    f.set_end_reason("exited");
    writer->finish(f);
  } else {
    writer->flush();
  }
  return path;
}

class FormatRoundTrip : public ::testing::TestWithParam<int> {};

TEST_P(FormatRoundTrip, EveryFieldComesBack) {
  auto events = sample_events(10000);
  std::string path = write_trace("roundtrip", events, true, GetParam());
  std::string error;
  auto reader = TraceReader::open(path, error);
  ASSERT_TRUE(reader) << error;
  EXPECT_EQ(reader->header().pid(), 1234);
  ASSERT_EQ(reader->header().command_size(), 2);
  Event e;
  size_t i = 0;
  while (reader->next(e)) {
    ASSERT_LT(i, events.size());
    const Event& w = events[i++];
    EXPECT_EQ(e.t_ns, w.t_ns);
    EXPECT_EQ(e.tid, w.tid);
    EXPECT_EQ(e.api, w.api);
    EXPECT_EQ(e.kind, w.kind);
    EXPECT_EQ(e.layer, Layer::kReserved);
    EXPECT_EQ(e.device, w.device);
    EXPECT_EQ(e.stream, w.stream);
    EXPECT_EQ(e.addr, w.addr);
    EXPECT_EQ(e.size, w.size);
    EXPECT_EQ(aux_value(e), aux_value(w));
    EXPECT_EQ(e.result, w.result);
    const auto* stack = reader->stack(e.stack_id);
    ASSERT_TRUE(stack && stack->size() == 1);
    EXPECT_EQ(reader->string(reader->frame(stack->front())->module()), "/bin/train");
  }
  EXPECT_EQ(i, events.size());
  ASSERT_TRUE(reader->footer());
  EXPECT_EQ(reader->footer()->events(), events.size());
  EXPECT_FALSE(reader->corrupt());
  EXPECT_TRUE(reader->problem().empty());
  fs::remove(path);
}

INSTANTIATE_TEST_SUITE_P(Compression, FormatRoundTrip, ::testing::Values(0, 1, 9),
                         [](const auto& info) { return "zstd" + std::to_string(info.param); });

TEST(Format, CompressionShrinksRepetitiveEvents) {
  std::vector<Event> events;
  for (int i = 0; i < 20000; ++i) {
    Event e;
    e.t_ns = 1000 + 700 * i;
    e.api = i % 2 ? Api::kCudaFree : Api::kCudaMalloc;
    e.addr = 0x7f0000000000ull + (i % 64) * 4096;
    e.size = 1 << 20;
    e.device = 0;
    e.tid = 4242;
    events.push_back(e);
  }
  std::string raw = write_trace("raw", events, true, 0), packed = write_trace("packed", events, true, 1);
  EXPECT_LT(fs::file_size(packed) * 4, fs::file_size(raw));
  EXPECT_LT(fs::file_size(packed), events.size() * 3) << "at most 3 bytes per event";
  fs::remove(raw);
  fs::remove(packed);
}

TEST(Format, NeverWritesOverAFileOrThroughALink) {
  std::string path = temp_path("exists");
  std::ofstream(path) << "precious";
  std::string error;
  EXPECT_FALSE(TraceWriter::create(path, error));
  EXPECT_NE(error.find("cannot create"), std::string::npos);
  std::string link = temp_path("link");
  fs::remove(link);
  fs::create_symlink(temp_path("target-does-not-exist"), link);
  EXPECT_FALSE(TraceWriter::create(link, error));
  EXPECT_FALSE(fs::exists(temp_path("target-does-not-exist")));
  fs::remove(path);
  fs::remove(link);
}

// A trace cut at any byte: opening fails with a message (inside the header) or the reader
// gives back a prefix of the events and says where the trace ends early.
TEST(Format, CutAtEveryByteReadsAPrefix) {
  auto events = sample_events(3 * TraceWriter::kEventsPerBatch + 100);
  std::string path = write_trace("cut-source", events);
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::string cut = temp_path("cut");
  size_t last_count = 0;
  // Every byte of the first 600 and around every chunk boundary would do; every 97th byte
  // elsewhere keeps the test fast while still landing in every chunk.
  for (size_t length = 0; length < bytes.size(); length += (length < 600 ? 1 : 97)) {
    {
      std::ofstream out(cut, std::ios::binary | std::ios::trunc);
      out.write(bytes.data(), static_cast<std::streamsize>(length));
    }
    std::string error;
    auto reader = TraceReader::open(cut, error);
    if (!reader) {
      EXPECT_FALSE(error.empty());
      continue;
    }
    Event e;
    size_t count = 0;
    while (reader->next(e)) {
      ASSERT_EQ(e.t_ns, events[count].t_ns) << "at length " << length;
      ++count;
    }
    EXPECT_FALSE(reader->corrupt()) << reader->problem();
    EXPECT_NE(reader->problem().find("trace ends early at byte"), std::string::npos) << reader->problem();
    EXPECT_GE(count, last_count);
    last_count = count;
  }
  fs::remove(cut);
  fs::remove(path);
}

TEST(Format, FlippedBitsNeverCrash) {
  auto events = sample_events(2000);
  std::string path = write_trace("flip-source", events);
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::string damaged = temp_path("flip");
  std::mt19937 rng(7);
  int detected = 0;
  for (int round = 0; round < 300; ++round) {
    std::string copy = bytes;
    size_t at = rng() % copy.size();
    copy[at] = static_cast<char>(copy[at] ^ (1 << (rng() % 8)));
    {
      std::ofstream out(damaged, std::ios::binary | std::ios::trunc);
      out.write(copy.data(), static_cast<std::streamsize>(copy.size()));
    }
    std::string error;
    auto reader = TraceReader::open(damaged, error);
    if (!reader) {
      ++detected;
      continue;
    }
    Event e;
    while (reader->next(e)) {
    }
    if (reader->corrupt()) {
      EXPECT_EQ(reader->problem().rfind("byte ", 0), 0u) << reader->problem();
    }
    // A flip in a length that runs past the end reads as a cut trace, which it then says.
    if (!reader->problem().empty()) ++detected;
  }
  // Every flip lands in a checksummed chunk or the checked file header.
  EXPECT_EQ(detected, 300);
  fs::remove(damaged);
  fs::remove(path);
}

TEST(Format, NewerVersionIsRefusedByName) {
  std::string path = write_trace("version", sample_events(10));
  {
    std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(8);
    const char v[4] = {9, 0, 0, 0};
    f.write(v, 4);
  }
  std::string error;
  EXPECT_FALSE(TraceReader::open(path, error));
  EXPECT_NE(error.find("version 9"), std::string::npos) << error;
  EXPECT_NE(error.find("up to 2"), std::string::npos) << error;
  fs::remove(path);
}

// Frees name the allocation they end (format version 2): across batches, long after it (past the
// reader's window of recent allocations), and not when they fail or free another layer's memory.
// Every event reads back exactly as written.
TEST(Format, FreesByReferenceReadBackExactly) {
  std::mt19937_64 rng(11);
  std::vector<Event> events, live;
  uint64_t t = 0, next_addr = 0x7f0000000000ull;
  auto add = [&](Api api, uint64_t addr, uint64_t size, int32_t result = 0, Layer layer = Layer::kReserved) {
    Event e;
    e.t_ns = t += 1 + rng() % 900;
    e.tid = 7;
    e.api = api;
    e.kind = api_info(api).kind;
    e.layer = layer;
    e.device = 0;
    e.addr = addr;
    e.size = size;
    e.result = result;
    events.push_back(e);
    return e;
  };
  for (int i = 0; i < 60000; ++i) {
    const uint64_t pick = rng() % 100;
    if (live.empty() || pick < 55) {  // the live set grows to thousands
      Event e =
          add(Api::kCudaMalloc, next_addr, 16 + rng() % 65536, 0, rng() % 8 ? Layer::kReserved : Layer::kAllocated);
      next_addr += 1 << 17;
      if (rng() % 3 == 0) next_addr = 0x7f0000000000ull + (rng() % 4096) * (1 << 17);  // an address used before
      live.push_back(e);
      continue;
    }
    // Frees mostly of young allocations, some of ones thousands of allocations old.
    const size_t at = rng() % 4 ? live.size() - 1 - rng() % std::min<size_t>(live.size(), 64) : rng() % live.size();
    const Event freed = live[at];
    live.erase(live.begin() + static_cast<std::ptrdiff_t>(at));
    if (pick < 90)
      add(Api::kCudaFree, freed.addr, 0, 0, freed.layer);  // by reference, as the collector writes it
    else if (pick < 94)
      add(Api::kCudaFree, freed.addr, freed.size, 0, freed.layer);  // with a size of its own
    else if (pick < 96)
      add(Api::kCudaFree, freed.addr, 0, 0, freed.layer == Layer::kReserved ? Layer::kAllocated : Layer::kReserved);
    else if (pick < 98)
      add(Api::kCudaFree, freed.addr, 0, 1, freed.layer);  // a failed free
    else
      add(Api::kCudaFree, freed.addr + 8, 0);  // an address never allocated
  }
  std::string path = write_trace("by-reference", events);
  std::string error;
  auto reader = TraceReader::open(path, error);
  ASSERT_TRUE(reader) << error;
  Event e;
  size_t i = 0;
  while (reader->next(e)) {
    ASSERT_LT(i, events.size());
    const Event& w = events[i];
    ASSERT_EQ(e.api, w.api) << "event " << i;
    ASSERT_EQ(e.addr, w.addr) << "event " << i;
    ASSERT_EQ(e.size, w.size) << "event " << i;
    ASSERT_EQ(e.t_ns, w.t_ns) << "event " << i;
    ASSERT_EQ(e.result, w.result) << "event " << i;
    ASSERT_EQ(e.layer, w.layer) << "event " << i;
    ++i;
  }
  EXPECT_EQ(i, events.size());
  EXPECT_TRUE(reader->problem().empty()) << reader->problem();
  fs::remove(path);
}

// A snapshot's events are the allocations live at its moment: nothing after them frees any, so
// they are not marked for frees by reference (a million live allocations made the writer a map of
// a million marks for nothing); the events of a trace before its snapshot are, and all read back.
TEST(Format, ASnapshotsLiveAllocationsAreNotMarked) {
  std::string path = temp_path("snapshot-marks");
  fs::remove(path);
  std::string error;
  auto writer = TraceWriter::create(path, error, /*compression=*/0);
  ASSERT_TRUE(writer) << error;
  writer->write_header(pb::TraceHeader());
  Event e;
  e.api = Api::kCudaMalloc;
  e.kind = api_info(e.api).kind;
  e.device = 0;
  e.size = 4096;
  e.addr = 0x7f0000000000ull;
  writer->add(e);  // before the snapshot: marked
  pb::Snapshot info;
  info.set_reason(pb::Snapshot::DEMAND);
  writer->write_snapshot(info);
  for (int i = 1; i <= 1000; ++i) {
    e.addr = 0x7f0000000000ull + static_cast<uint64_t>(i) * 4096;
    e.t_ns = static_cast<uint64_t>(i);
    writer->add(e);
  }
  writer->finish(pb::Footer());

  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  using framing::get_u32, framing::kChunkHeaderBytes, framing::kFileHeaderBytes;
  std::vector<std::vector<uint64_t>> freed_columns;  // of each events chunk, in order
  for (size_t at = kFileHeaderBytes; at + kChunkHeaderBytes <= bytes.size();) {
    const auto* frame = reinterpret_cast<const unsigned char*>(bytes.data() + at);
    const uint32_t length = get_u32(frame);
    pb::Chunk chunk;
    ASSERT_TRUE(chunk.ParseFromArray(frame + kChunkHeaderBytes, static_cast<int>(length)));
    if (chunk.has_events()) freed_columns.emplace_back(chunk.events().freed().begin(), chunk.events().freed().end());
    at += kChunkHeaderBytes + length;
  }
  ASSERT_EQ(freed_columns.size(), 2u) << "the event before the snapshot, then the snapshot's";
  EXPECT_EQ(freed_columns[0], std::vector<uint64_t>{1}) << "marked";
  EXPECT_TRUE(freed_columns[1].empty()) << "the snapshot's allocations are not marked";

  auto reader = TraceReader::open(path, error);
  ASSERT_TRUE(reader) << error;
  size_t read = 0;
  while (reader->next(e)) ++read;
  EXPECT_EQ(read, 1001u);
  EXPECT_TRUE(reader->problem().empty()) << reader->problem();
  fs::remove(path);
}

// A reference to no live allocation (a damaged or hostile trace) ends the reading with a line
// that says so.
TEST(Format, AFreeOfNoLiveAllocationIsRefused) {
  // 2: the newest allocation, 3: the one the last reference freed (none yet: the first); 4: one
  // before the newest (there is none); the rest far past either end.
  for (uint64_t value : {uint64_t{2}, uint64_t{3}, uint64_t{4}, uint64_t{1} << 40, (uint64_t{1} << 40) + 1}) {
    std::vector<Event> events = {Event{}};
    events[0].api = Api::kCudaMalloc;
    events[0].addr = 0x1000;
    events[0].size = 64;
    std::string path = write_trace("bad-reference", events, false);
    pb::Chunk chunk;
    pb::EventBatch* batch = chunk.mutable_events();
    batch->set_count(2);
    for (uint64_t freed : {value, value}) {  // the second frees the first's allocation again
      batch->add_api(static_cast<uint32_t>(Api::kCudaFree));
      batch->add_freed(freed);
    }
    const std::string body = chunk.SerializeAsString();
    unsigned char head[framing::kChunkHeaderBytes] = {};
    framing::put_u32(head, static_cast<uint32_t>(body.size()));
    framing::put_u32(head + 8, framing::crc32c(body.data(), body.size()));
    {
      std::ofstream out(path, std::ios::binary | std::ios::app);
      out.write(reinterpret_cast<const char*>(head), sizeof head);
      out.write(body.data(), static_cast<std::streamsize>(body.size()));
    }
    std::string error;
    auto reader = TraceReader::open(path, error);
    ASSERT_TRUE(reader) << error;
    Event e;
    while (reader->next(e)) {
    }
    EXPECT_TRUE(reader->corrupt()) << value;
    const std::string expected = value <= 3 ? "event 1 of a batch frees by reference allocation 0, which is not live"
                                            : "event 0 of a batch frees by reference";
    EXPECT_NE(reader->problem().find(expected), std::string::npos) << reader->problem();
    fs::remove(path);
  }
}

// Appends CHUNK to the trace at PATH, compressed.
void append_chunk(const std::string& path, const pb::Chunk& chunk) {
  std::ofstream out(path, std::ios::binary | std::ios::app);
  memtrace::testing::append_crafted_chunk(out, chunk);
}

// Reads the trace at PATH to its end; its problem.
std::string read_to_the_end(const std::string& path) {
  std::string error;
  auto reader = TraceReader::open(path, error);
  if (!reader) return error;
  Event e;
  while (reader->next(e)) {
  }
  return reader->problem();
}

// A crafted trace: a stack chunk of one frame id repeated packs millions of ids into kilobytes
// (a 12.6 KB trace made memtrace report hold 4.4 GB, more with each such chunk). A stack holds at
// most framing::kMaxStackFrames frames and the tables framing::kMaxTableBytes, whatever the file.
TEST(Format, CraftedStacksStopAtTheTablesBounds) {
  std::string path = write_trace("deep-stack", sample_events(10), false);  // frame 1, stacks 0 and 1
  pb::Chunk deep;
  pb::Stack* stack = deep.mutable_stacks()->add_stacks();
  stack->set_id(2);
  for (uint32_t i = 0; i <= framing::kMaxStackFrames; ++i) stack->add_frame_ids(1);
  append_chunk(path, deep);
  EXPECT_NE(read_to_the_end(path).find("stack 2 has 4097 frames, more than the 4096 a trace may hold in one stack"),
            std::string::npos)
      << read_to_the_end(path);
  fs::remove(path);

  // Chunks of the deepest stacks allowed, each just under the chunk limit (held, one takes the
  // tables to their bound): the reading stops there.
  path = write_trace("many-stacks", sample_events(10), false);
  const uint64_t per_stack = framing::kMaxStackFrames + 16;  // its ids, one byte each, and its framing
  const uint64_t per_chunk = (framing::kMaxChunkBytes - 1024) / per_stack;
  for (uint64_t c = 0, id = 2; c < 2; ++c) {
    pb::Chunk chunk;
    for (uint64_t i = 0; i < per_chunk; ++i) {
      pb::Stack* s = chunk.mutable_stacks()->add_stacks();
      s->set_id(id++);
      s->mutable_frame_ids()->Resize(framing::kMaxStackFrames, 1);
    }
    append_chunk(path, chunk);
  }
  EXPECT_LT(fs::file_size(path), 1u << 20) << "kilobytes on disk";
  EXPECT_NE(read_to_the_end(path).find("the stacks take the tables past the 512 MiB a trace may make a reader hold"),
            std::string::npos)
      << read_to_the_end(path);
  fs::remove(path);
}

// A writer never writes a stack a reader refuses: the innermost frames, marked cut.
TEST(Format, AStackDeeperThanReadersTakeIsCutWhenWritten) {
  std::string path = temp_path("cut-stack");
  fs::remove(path);
  std::string error;
  auto writer = TraceWriter::create(path, error);
  ASSERT_TRUE(writer) << error;
  writer->write_header(pb::TraceHeader());
  std::vector<uint64_t> frames;
  for (int i = 0; i < 5000; ++i) {
    const std::string name = "f" + std::to_string(i);  // outlives the view the writer reads
    FrameInfo info;
    info.address = 0x1000 + i;
    info.function = name;
    frames.push_back(writer->intern_frame(info));
  }
  const uint64_t stack = writer->intern_stack(frames);
  Event e;
  e.api = Api::kCudaMalloc;
  e.addr = 0x1000;
  e.size = 64;
  e.stack_id = stack;
  writer->add(e);
  writer->finish(pb::Footer());
  auto reader = TraceReader::open(path, error);
  ASSERT_TRUE(reader) << error;
  Event read;
  while (reader->next(read)) {
  }
  EXPECT_FALSE(reader->corrupt()) << reader->problem();
  ASSERT_NE(reader->stack(stack), nullptr);
  EXPECT_EQ(reader->stack(stack)->size(), framing::kMaxStackFrames);
  EXPECT_EQ(reader->stack(stack)->front(), frames.front()) << "the innermost frames are kept";
  EXPECT_EQ(reader->stack_flags(stack), uint32_t(pb::STACK_TRUNCATED));
  fs::remove(path);
}

// Traces of format version 1 (memtrace before frees named what they freed, kept in tests/data/v1)
// read as they always did, and write back as version 2 with every event the same.
TEST(Format, VersionOneTracesStillRead) {
  for (const char* name : {"train_loop.memtrace", "torch_train.memtrace"}) {
    const std::string source = std::string(MEMTRACE_TEST_DATA_DIR) + "/v1/" + name;
    unsigned char head[framing::kFileHeaderBytes] = {};
    {
      std::ifstream in(source, std::ios::binary);
      in.read(reinterpret_cast<char*>(head), sizeof head);
    }
    ASSERT_EQ(framing::get_u32(head + 8), 1u) << name;
    std::string error;
    auto reader = TraceReader::open(source, error);
    ASSERT_TRUE(reader) << error;
    std::vector<Event> events;
    Event e;
    while (reader->next(e)) events.push_back(e);
    ASSERT_TRUE(reader->footer()) << name;
    EXPECT_TRUE(reader->problem().empty()) << reader->problem();
    EXPECT_EQ(events.size(), reader->footer()->events()) << name;
    size_t frees = 0;
    for (const Event& x : events) frees += x.op() == Op::kFree;
    EXPECT_GT(frees, 40u) << name;
    std::string path = write_trace(std::string("v2-") + name, events);
    auto again = TraceReader::open(path, error);
    ASSERT_TRUE(again) << error;
    size_t i = 0;
    while (again->next(e)) {
      ASSERT_LT(i, events.size());
      ASSERT_EQ(e.addr, events[i].addr) << name << " event " << i;
      ASSERT_EQ(e.size, events[i].size) << name << " event " << i;
      ASSERT_EQ(e.api, events[i].api) << name << " event " << i;
      ++i;
    }
    EXPECT_EQ(i, events.size());
    fs::remove(path);
  }
}

// A program's argument, a file or function name, a device's name: whatever bytes they are, the
// trace reads (protobuf refuses strings that are not UTF-8), and shows each stray byte as \xNN.
TEST(Format, TextThatIsNotUtf8StaysReadable) {
  std::string path = fs::temp_directory_path() / ("memtrace-utf8-" + std::to_string(::getpid()) + ".memtrace");
  fs::remove(path);
  std::string error;
  {
    auto writer = TraceWriter::create(path, error);
    ASSERT_TRUE(writer) << error;
    pb::TraceHeader header;
    header.add_command("train");
    header.add_command("caf\xe9");               // Latin-1
    header.add_command("\xe2\x82\xac ok");       // UTF-8
    header.add_command("\xed\xa0\x80\xc0\xaf");  // a surrogate, an overlong '/'
    writer->write_header(header);
    pb::Device device;
    device.set_name("GPU \xff");
    writer->add_device(device);
    FrameInfo frame;
    frame.python = true;
    frame.function = "f\x80";
    frame.file = "/data/\xfe.py";
    Event e = sample_events(1)[0];
    e.stack_id = writer->intern_stack({writer->intern_frame(frame)});
    writer->add(e);
    pb::Footer footer;
    footer.set_end_reason("exited \xff");
    writer->finish(footer);
  }
  auto reader = TraceReader::open(path, error);
  ASSERT_TRUE(reader) << error;
  Event e;
  ASSERT_TRUE(reader->next(e)) << reader->problem();
  EXPECT_EQ(reader->header().command(1), "caf\\xe9");
  EXPECT_EQ(reader->header().command(2), "\xe2\x82\xac ok");
  EXPECT_EQ(reader->header().command(3), "\\xed\\xa0\\x80\\xc0\\xaf");
  const pb::Frame* f = reader->frame(reader->stack(e.stack_id)->front());
  ASSERT_TRUE(f);
  EXPECT_EQ(reader->string(f->function()), "f\\x80");
  EXPECT_EQ(reader->string(f->file()), "/data/\\xfe.py");
  while (reader->next(e)) {
  }
  ASSERT_TRUE(reader->footer()) << reader->problem();
  EXPECT_EQ(reader->footer()->end_reason(), "exited \\xff");
  EXPECT_EQ(reader->header().devices(0).name(), "GPU \\xff");
  fs::remove(path);
}

TEST(Format, TraceWithoutFooterSaysSo) {
  std::string path = write_trace("nofooter", sample_events(50), false);
  std::string error;
  auto reader = TraceReader::open(path, error);
  ASSERT_TRUE(reader);
  Event e;
  size_t n = 0;
  while (reader->next(e)) ++n;
  EXPECT_EQ(n, 50u);
  EXPECT_FALSE(reader->footer());
  EXPECT_NE(reader->problem().find("trace ends early"), std::string::npos);
  fs::remove(path);
}

}  // namespace

// The CRC that guards every chunk, against the standard check value and a bitwise reference
// at every length and alignment (the fast path works eight bytes at a time).
TEST(Framing, Crc32cMatchesTheReference) {
  EXPECT_EQ(memtrace::framing::crc32c("123456789", 9), 0xE3069283u);
  auto reference = [](const unsigned char* p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; ++i) {
      c ^= p[i];
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    }
    return c ^ 0xFFFFFFFFu;
  };
  unsigned char bytes[80];
  for (size_t i = 0; i < sizeof bytes; ++i) bytes[i] = static_cast<unsigned char>(i * 37 + 11);
  for (size_t start = 0; start < 8; ++start)
    for (size_t n = 0; start + n <= sizeof bytes; ++n)
      ASSERT_EQ(memtrace::framing::crc32c(bytes + start, n), reference(bytes + start, n)) << start << "+" << n;
}
