// A trace handed from its writer to its reader in one process (ChunkChannel) reads as the same
// trace written to a file and read back, and neither side can hold the other up for good.
#include "memtrace/format/chunk_channel.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <thread>

#include "memtrace/format/trace_reader.h"
#include "memtrace/format/trace_writer.h"

namespace {

using namespace memtrace;

// Every field set, and the three that share a column (handle, heap, name) all set: a file keeps
// the API's own, and so must the channel.
std::vector<Event> varied_events(size_t n) {
  std::vector<Event> events;
  std::mt19937_64 rng(7);
  uint64_t t = 1000;
  for (size_t i = 0; i < n; ++i) {
    Event e;
    t += rng() % 5000;
    e.t_ns = t;
    e.tid = 100 + static_cast<uint32_t>(rng() % 4);
    e.api = static_cast<Api>(1 + rng() % (static_cast<int>(Api::kCount) - 1));
    e.kind = api_info(e.api).kind;
    e.layer = i % 3 ? Layer::kReserved : Layer::kAllocated;
    e.device = static_cast<int32_t>(rng() % 3) - 1;
    e.stream = (i % 7 == 0) ? rng() : 0;
    e.addr = 0x7f0000000000ull + (rng() % (1ull << 30));
    e.size = rng() % (1ull << 33);
    e.handle = rng();
    e.heap = rng();
    e.name = rng() % 3;
    e.result = (i % 13 == 0) ? 2 : 0;
    e.device_free = i % 5 ? 0 : rng();
    e.device_total = e.device_free ? rng() : 0;
    e.flags = i % 17 ? 0u : static_cast<uint32_t>(kEventCaptured);
    events.push_back(e);
  }
  return events;
}

// Writes EVENTS (with a stack) into WRITER, header to footer when FINISH.
void write_into(TraceWriter& writer, const std::vector<Event>& events, bool finish = true) {
  pb::TraceHeader header;
  header.set_pid(4321);
  writer.write_header(header);
  writer.intern_string("x");
  writer.intern_string("y");
  FrameInfo info;
  info.function = "step";
  info.file = "train.py";
  info.line = 12;
  info.python = true;
  uint64_t stack = writer.intern_stack({writer.intern_frame(info)});
  for (Event e : events) {
    e.stack_id = e.api == Api::kCudaMalloc ? stack : 0;
    writer.add(e);
  }
  if (finish) {
    pb::Footer footer;
    footer.set_end_reason("exited");
    writer.finish(footer);
  } else {
    writer.flush();
  }
}

std::vector<Event> read_all(TraceReader& reader) {
  std::vector<Event> out;
  Event e;
  while (reader.next(e)) out.push_back(e);
  return out;
}

std::string bytes_of(const Event& e) { return std::string(reinterpret_cast<const char*>(&e), sizeof e); }

TEST(ChunkChannel, ATraceHandedOverReadsAsItsFile) {
  std::vector<Event> events =
      varied_events(3 * TraceWriter::kChannelEventsPerBatch * 5 + 17);  // more batches than it holds
  std::string path =
      (std::filesystem::temp_directory_path() / ("memtrace-unit-" + std::to_string(::getpid()) + "-channel.memtrace"))
          .string();
  std::filesystem::remove(path);
  std::string error;
  {
    auto file_writer = TraceWriter::create(path, error, 0);
    ASSERT_TRUE(file_writer) << error;
    write_into(*file_writer, events);
  }
  auto from_file = TraceReader::open(path, error);
  ASSERT_TRUE(from_file) << error;

  auto channel = std::make_shared<ChunkChannel>();
  auto writer = TraceWriter::create_on(channel, "handed over", error);
  ASSERT_TRUE(writer) << error;
  std::thread writing([&] { write_into(*writer, events); });
  auto handed = TraceReader::open(channel, "handed over", error);
  ASSERT_TRUE(handed) << error;
  handed->prefetch();
  std::vector<Event> a = read_all(*from_file), b = read_all(*handed);
  writing.join();
  EXPECT_FALSE(writer->failed()) << writer->error();

  EXPECT_EQ(handed->header().pid(), 4321);
  ASSERT_EQ(a.size(), events.size());
  ASSERT_EQ(b.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(bytes_of(a[i]), bytes_of(b[i])) << "event " << i;
  uint64_t stack = 0;
  for (const Event& e : b) stack = std::max(stack, e.stack_id);
  ASSERT_NE(stack, 0u);
  const auto* frames = handed->stack(stack);
  ASSERT_TRUE(frames && frames->size() == 1);
  EXPECT_EQ(handed->string(handed->frame(frames->front())->file()), "train.py");
  EXPECT_EQ(handed->string(1), "x");
  ASSERT_TRUE(handed->footer());
  EXPECT_EQ(handed->footer()->events(), events.size());
  EXPECT_FALSE(handed->corrupt()) << handed->problem();
  std::filesystem::remove(path);
}

TEST(ChunkChannel, AReaderThatGoesEarlyLetsItsWriterGo) {
  auto channel = std::make_shared<ChunkChannel>();
  std::string error;
  auto writer = TraceWriter::create_on(channel, "handed over", error);
  ASSERT_TRUE(writer) << error;
  std::vector<Event> events = varied_events(TraceWriter::kChannelEventsPerBatch * 40);  // far more than it holds
  std::thread writing([&] { write_into(*writer, events); });
  {
    auto reader = TraceReader::open(channel, "handed over", error);
    ASSERT_TRUE(reader) << error;
    Event e;
    for (int i = 0; i < 10; ++i) ASSERT_TRUE(reader->next(e));
  }  // the reader goes: the writer, waiting for room, must not wait for good
  writing.join();
  EXPECT_TRUE(writer->failed());
  EXPECT_NE(writer->error().find("its reader went"), std::string::npos) << writer->error();
}

TEST(ChunkChannel, AWriterThatStopsEarlyLeavesACutTrace) {
  auto channel = std::make_shared<ChunkChannel>();
  std::string error;
  auto writer = TraceWriter::create_on(channel, "handed over", error);
  ASSERT_TRUE(writer) << error;
  std::vector<Event> events = varied_events(50);
  std::thread writing([&] {
    write_into(*writer, events, false);
    writer.reset();  // gone without its footer (an import that failed half way)
  });
  auto reader = TraceReader::open(channel, "handed over", error);
  ASSERT_TRUE(reader) << error;
  EXPECT_EQ(read_all(*reader).size(), events.size());
  writing.join();
  EXPECT_FALSE(reader->footer());
  EXPECT_NE(reader->problem().find("trace ends early"), std::string::npos) << reader->problem();
}

}  // namespace
