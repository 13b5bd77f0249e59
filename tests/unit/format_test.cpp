// The trace format: what is written reads back the same, and a cut or damaged file never
// crashes the reader: it reads what is whole or says what is wrong and where.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

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
  EXPECT_NE(error.find("up to 1"), std::string::npos) << error;
  fs::remove(path);
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
