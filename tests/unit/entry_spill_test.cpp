// The snapshot import's entries kept between its passes (EntrySpill): what is read back is what was
// put in, and an import through them writes the trace an import that parses the pickle again
// writes.
#include "entry_spill.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "memtrace/format/trace_reader.h"
#include "memtrace/format/trace_writer.h"
#include "memtrace/importers/pickle.h"
#include "memtrace/importers/torch_snapshot.h"

namespace {

using memtrace::TorchAction;
using memtrace::snapshot::Entry;
using memtrace::snapshot::EntrySpill;

bool same(const Entry& a, const Entry& b) {
  return a.action == b.action && a.addr == b.addr && a.size == b.size && a.stream == b.stream &&
         a.device_free == b.device_free && a.time_us == b.time_us && a.stack == b.stack && a.category == b.category;
}

TEST(EntrySpill, ReadsBackWhatWasPutIn) {
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  std::vector<Entry> entries;
  Entry e;
  entries.push_back(e);  // all defaults: no action, no time
  for (uint64_t addr : {uint64_t{0}, kMax, uint64_t{1} << 47, uint64_t{5}, kMax - 1}) {
    e.action = TorchAction::kAlloc;
    e.addr = addr;
    e.size = kMax - addr;
    e.device_free = addr;
    e.stream = addr % 3 ? kMax : 0;
    e.time_us = static_cast<int64_t>(addr);  // kMax: -1, no time
    e.stack = addr % 2;
    e.category = addr;
    entries.push_back(e);
    e.action = TorchAction::kOom;
    e.device_free = 12345;
    e.time_us = std::numeric_limits<int64_t>::min();
    entries.push_back(e);
    e.action.reset();
    e.time_us = std::numeric_limits<int64_t>::max();
    entries.push_back(e);
  }
  // Enough for several of its blocks: records cut between two reads.
  for (int i = 0; i < 300000; ++i) {
    e.action = static_cast<TorchAction>(i % 9);
    e.addr = (uint64_t{1} << 40) + static_cast<uint64_t>(i) * 4099 % 1000003;
    e.size = static_cast<uint64_t>(i) * 512;
    e.device_free = i % 5 ? e.addr : static_cast<uint64_t>(i);
    e.stream = static_cast<uint64_t>(i % 4);
    e.time_us = i % 7 ? 1700000000000000 + i : -1;
    e.stack = static_cast<uint64_t>(i % 100);
    e.category = static_cast<uint64_t>(i % 3);
    entries.push_back(e);
  }
  std::unique_ptr<EntrySpill> spill = EntrySpill::create();
  ASSERT_TRUE(spill);
  for (const Entry& in : entries) spill->add(in);
  ASSERT_TRUE(spill->finish());
  EXPECT_EQ(spill->count(), entries.size());
  Entry out;
  for (size_t i = 0; i < entries.size(); ++i) {
    ASSERT_TRUE(spill->next(out)) << i << " " << spill->error();
    ASSERT_TRUE(same(out, entries[i])) << i;
  }
  EXPECT_FALSE(spill->next(out));
  EXPECT_TRUE(spill->error().empty()) << spill->error();

  std::unique_ptr<EntrySpill> empty = EntrySpill::create();
  ASSERT_TRUE(empty->finish());
  EXPECT_FALSE(empty->next(out));
}

std::vector<Entry> numbered(size_t n) {
  std::vector<Entry> entries(n);
  for (size_t i = 0; i < n; ++i) {
    entries[i].action = TorchAction::kAlloc;
    entries[i].addr = entries[i].device_free = 4096 * i;
    entries[i].size = i;
  }
  return entries;
}

// The follower (the first pass learns what was live before the trace there) is told of every
// entry, in order, by the time finish() returns; and of every entry handed to the spill's thread
// (batches of 4,096) before a spill dropped unfinished is gone.
TEST(EntrySpill, ItsFollowerIsToldOfEveryEntryInOrder) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{4095}, size_t{4096}, size_t{50001}}) {
    std::vector<Entry> entries = numbered(n), told;
    std::unique_ptr<EntrySpill> spill = EntrySpill::create([&told](const Entry& e) { told.push_back(e); });
    ASSERT_TRUE(spill);
    for (const Entry& e : entries) spill->add(e);
    ASSERT_TRUE(spill->finish());
    ASSERT_EQ(told.size(), n);
    for (size_t i = 0; i < n; ++i) ASSERT_TRUE(same(told[i], entries[i])) << i;
  }
  for (int round = 0; round < 20; ++round) {
    size_t told = 0;
    {
      std::unique_ptr<EntrySpill> spill = EntrySpill::create([&told](const Entry&) { ++told; });
      for (const Entry& e : numbered(3 * 4096 + 17)) spill->add(e);
    }                                   // dropped while its thread may still be at work: done with it here
    EXPECT_EQ(told, size_t{3 * 4096});  // the 17 never handed over were never to be told
  }
}

// Where its file cannot be written (a full disk: here a file size limit), the spill fails and is
// not read back, but its follower is still told of every entry: the import parses again, and needs
// what was live before all the same.
TEST(EntrySpill, ItsFollowerIsToldOfEveryEntryWhenTheFileFails) {
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::signal(SIGXFSZ, SIG_IGN);  // a write past the limit fails with EFBIG instead
    rlimit limit{64 << 10, 64 << 10};
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) ::_exit(10);
    size_t told = 0;
    std::unique_ptr<EntrySpill> spill = EntrySpill::create([&told](const Entry&) { ++told; });
    if (!spill) ::_exit(11);
    for (const Entry& e : numbered(300000)) spill->add(e);
    if (spill->finish()) ::_exit(12);  // 300,000 entries do not fit in 64 KiB
    Entry out;
    if (spill->next(out) || spill->error().empty()) ::_exit(13);
    ::_exit(told == 300000 ? 0 : 14);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// A trace as text: every event with its stack's frames, in order.
std::string imported(const std::string& bytes, bool spill, std::string& error) {
  int fd = ::memfd_create("imported", MFD_CLOEXEC);
  if (fd < 0) return "no memfd";
  {
    auto writer = memtrace::TraceWriter::create_on(::dup(fd), "imported", error, 0);
    if (!writer || !memtrace::import_torch_snapshot(bytes, "snapshot", *writer, error, nullptr, spill)) {
      ::close(fd);
      return "not imported";
    }
  }
  ::lseek(fd, 0, SEEK_SET);
  auto reader = memtrace::TraceReader::open(::fdopen(fd, "rb"), "imported", error);
  if (!reader) return "not read";
  std::ostringstream text;
  memtrace::Event event;
  while (reader->next(event)) {
    text << event.t_ns << " " << static_cast<int>(event.api) << " " << event.device << " " << event.addr << " "
         << event.size << " " << event.stream << " " << event.device_free << " " << reader->string(event.name) << " [";
    if (const auto* stack = reader->stack(event.stack_id))
      for (uint64_t id : *stack)
        if (const auto* frame = reader->frame(id))
          text << reader->string(frame->function()) << "@" << reader->string(frame->file()) << ":" << frame->line()
               << " ";
    text << "]\n";
  }
  text << (reader->footer() ? reader->footer()->DebugString() : "no footer");
  return text.str();
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Every real snapshot of tests/data, and one of many batches in two devices' traces: the same
// trace whether the second pass reads the entries back or parses them again.
TEST(EntrySpill, AnImportThroughItWritesTheSameTrace) {
  std::vector<std::string> snapshots;
  for (const char* name : {"2.1-finetune", "2.3-attention-backward", "2.3-compiled-annotations", "upto2.0-oom"})
    snapshots.push_back(file_bytes(std::string(MEMTRACE_TEST_DATA_DIR) + "/torch/" + name + ".pickle"));
  memtrace::pickle::Writer w;
  w.begin_dict();
  w.str("segments");
  w.begin_list();
  w.end_list();
  w.str("device_traces");
  w.begin_list();
  for (int device = 0; device < 2; ++device) {
    w.begin_list();
    for (int i = 0; i < 5000; ++i) {
      w.begin_dict();
      w.str("action");
      w.str(i % 2 ? "free_completed" : "alloc");
      w.str("addr");
      w.integer((int64_t{1} << 40) + 512 * (i / 2));
      w.str("size");
      w.integer(512);
      w.str("time_us");
      w.integer(1000 + 3 * i + device);
      w.str("frames");
      if (!w.recall(static_cast<uint64_t>(i % 7))) {
        w.begin_list();
        w.begin_dict();
        w.str("filename");
        w.str("train.py");
        w.str("line");
        w.integer(i % 7);
        w.str("name");
        w.str("step");
        w.end_dict();
        w.end_list();
        w.memoize(static_cast<uint64_t>(i % 7));
      }
      w.end_dict();
    }
    w.end_list();
  }
  w.end_list();
  w.end_dict();
  snapshots.push_back(w.finish());
  for (size_t i = 0; i < snapshots.size(); ++i) {
    ASSERT_GT(snapshots[i].size(), 1000u) << i;
    std::string error_parsed, error_spilled;
    std::string parsed = imported(snapshots[i], false, error_parsed);
    std::string spilled = imported(snapshots[i], true, error_spilled);
    EXPECT_EQ(error_parsed, error_spilled) << i;
    EXPECT_GT(parsed.size(), 1000u) << i << ": " << error_parsed;
    EXPECT_EQ(parsed, spilled) << i;
  }
}

}  // namespace
