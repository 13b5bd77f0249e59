// A real trace (stacks, frames, strings, devices, compressed chunks) cut at every chunk boundary
// and around it, at random bytes, and with random bits flipped: the reader gives back a prefix
// of the events, or stops with a message; it never crashes. A crafted trace that asks for more
// memory than memtrace is given ends the command with one line, never an abort.
#include <gtest/gtest.h>
#include <zstd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "../unit/crafted_chunk.h"
#include "harness.h"
#include "memtrace/format/framing.h"
#include "memtrace/format/trace_reader.h"
#include "memtrace/format/trace_writer.h"

namespace {

namespace fs = std::filesystem;
using namespace memtrace;

struct Read {
  bool opened = false;
  std::vector<uint64_t> times;
  bool corrupt = false;
  std::string problem;
};

Read read_bytes(const std::string& bytes) {
  Read r;
  std::FILE* file = fmemopen(const_cast<char*>(bytes.data()), bytes.size(), "rb");
  std::string error;
  auto reader = TraceReader::open(file, "damaged", error);
  if (!reader) return r;
  r.opened = true;
  Event e;
  while (reader->next(e)) {
    if (const auto* stack = reader->stack(e.stack_id)) {
      for (uint64_t id : *stack) EXPECT_NE(reader->frame(id), nullptr);
    }
    r.times.push_back(e.t_ns);
  }
  r.corrupt = reader->corrupt();
  r.problem = reader->problem();
  return r;
}

class DamagedTrace : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string dir = e2e::temp_dir("source");
    ASSERT_EQ(e2e::run_sample(dir, "train_loop", {"--steps", "300"}, {"--sim-devices", "2"}).status, 0);
    fs::path trace = fs::directory_iterator(dir + "/traces")->path();
    std::ifstream in(trace, std::ios::binary);
    bytes_.assign(std::istreambuf_iterator<char>(in), {});
    whole_ = read_bytes(bytes_);
    ASSERT_TRUE(whole_.opened);
    ASSERT_GT(whole_.times.size(), 5000u);
    // The chunk boundaries, from the framing.
    for (size_t at = framing::kFileHeaderBytes; at + framing::kChunkHeaderBytes <= bytes_.size();) {
      boundaries_.push_back(at);
      at += framing::kChunkHeaderBytes + framing::get_u32(reinterpret_cast<const unsigned char*>(bytes_.data()) + at);
    }
    ASSERT_GT(boundaries_.size(), 6u);
  }

  void expect_prefix(const Read& r, size_t cut) {
    if (!r.opened) return;  // cut inside the file header or the trace header: refused with a message
    ASSERT_LE(r.times.size(), whole_.times.size()) << "cut at " << cut;
    for (size_t i = 0; i < r.times.size(); ++i) ASSERT_EQ(r.times[i], whole_.times[i]) << "cut at " << cut;
    EXPECT_FALSE(r.corrupt) << "cut at " << cut << ": " << r.problem;
    EXPECT_NE(r.problem.find("trace ends early at byte"), std::string::npos) << "cut at " << cut;
  }

  std::string bytes_;
  Read whole_;
  std::vector<size_t> boundaries_;
};

TEST_F(DamagedTrace, CutAtEveryChunkBoundaryAndAroundIt) {
  size_t last = 0;
  for (size_t boundary : boundaries_) {
    for (size_t cut : {boundary - 1, boundary, boundary + 1, boundary + 7}) {
      if (cut >= bytes_.size()) continue;
      Read r = read_bytes(bytes_.substr(0, cut));
      expect_prefix(r, cut);
      if (cut == boundary) {
        EXPECT_GE(r.times.size(), last);
        last = r.times.size();
      }
    }
  }
}

TEST_F(DamagedTrace, CutAtRandomBytes) {
  std::mt19937 rng(2026);
  for (int i = 0; i < 200; ++i) {
    size_t cut = rng() % bytes_.size();
    expect_prefix(read_bytes(bytes_.substr(0, cut)), cut);
  }
}

TEST_F(DamagedTrace, RandomBitFlipsAreFoundOrHarmless) {
  std::mt19937 rng(11);
  for (int i = 0; i < 300; ++i) {
    std::string copy = bytes_;
    size_t at = rng() % copy.size();
    copy[at] = static_cast<char>(copy[at] ^ (1 << (rng() % 8)));
    Read r = read_bytes(copy);
    if (!r.opened) continue;
    // Every chunk is checksummed: a flip is reported (with its byte offset), never read as data.
    EXPECT_FALSE(r.problem.empty()) << "flip at byte " << at << " went unnoticed";
    if (r.corrupt) {
      EXPECT_EQ(r.problem.rfind("byte ", 0), 0u) << r.problem;
    }
  }
}

// A trace whose stack chunks, a few kilobytes of zstd each, unpack to the deepest stacks a reader
// takes, up to the tables' bound: given less memory than that (prlimit), memtrace report says so
// in one line and exits 2 (std::bad_alloc used to escape: SIGABRT).
TEST(CraftedTrace, OutOfMemoryIsOneLineAndExitTwo) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP()
      << "a sanitizer's runtime maps terabytes of shadow memory at start, which an address-space limit refuses";
#endif
  const std::string dir = e2e::temp_dir("crafted"), path = dir + "/crafted.memtrace";
  std::string error;
  uint64_t stacks = 0;
  {  // a process's first chunks, as a trace read while it is written has them
    auto writer = TraceWriter::create(path, error);
    ASSERT_TRUE(writer) << error;
    writer->write_header(pb::TraceHeader());
    FrameInfo frame;
    frame.address = 0x401000;
    frame.function = "main";
    Event e;
    e.api = Api::kCudaMalloc;
    e.addr = 0x1000;
    e.size = 1 << 20;
    e.stack_id = writer->intern_stack({writer->intern_frame(frame)});
    stacks = e.stack_id + 1;
    writer->add(e);
    writer->flush();
  }
  std::ofstream out(path, std::ios::binary | std::ios::app);
  for (int c = 0; c < 2; ++c) {
    pb::Chunk chunk;
    for (uint64_t i = 0; i < (framing::kMaxChunkBytes - 1024) / (framing::kMaxStackFrames + 16); ++i) {
      pb::Stack* s = chunk.mutable_stacks()->add_stacks();
      s->set_id(stacks++);
      s->mutable_frame_ids()->Resize(framing::kMaxStackFrames, 1);
    }
    memtrace::testing::append_crafted_chunk(out, chunk);
  }
  out.close();
  e2e::Result r =
      e2e::run({"/usr/bin/prlimit", "--as=" + std::to_string(768ull << 20), e2e::kMemtrace, "report", path});
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_EQ(r.err,
            "memtrace report: out of memory: what it read needs more memory than this machine gives it (free some, or "
            "read fewer traces at once)\n");
}

}  // namespace
