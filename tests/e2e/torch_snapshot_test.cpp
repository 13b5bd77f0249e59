// PyTorch memory snapshots in and out: every analysis command reads the pickles PyTorch writes (one
// real snapshot of each format generation, tests/data/torch/README.md says whose), with the
// figures PyTorch counts (held against an independent reading with Python's pickle,
// torch_reference.py); bad pickles get one sentence; the memory-viz export is what
// pytorch.org/memory_viz reads (memory_viz_check.py lists its rules) and reads back to the same
// figures.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "harness.h"
#include "memtrace/engine/trace_set.h"

namespace {

namespace fs = std::filesystem;

const std::string kData = MEMTRACE_TEST_DATA "/torch";
const std::string kReference = MEMTRACE_E2E_SOURCE "/torch_reference.py";
const std::string kViewerCheck = MEMTRACE_E2E_SOURCE "/memory_viz_check.py";

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

nlohmann::json reference(const std::string& pickle) {
  e2e::Result r = e2e::run({MEMTRACE_PYTHON, kReference, pickle});
  EXPECT_EQ(r.status, 0) << r.err;
  return nlohmann::json::parse(r.out, nullptr, false);
}

// memtrace's figures of a file, in torch_reference.py's shape.
nlohmann::json measured(const std::string& path) {
  nlohmann::json out = nlohmann::json::array();
  nlohmann::json reserved = e2e::command_json({e2e::kMemtrace, "peak", "--json", path});
  nlohmann::json allocated = e2e::command_json({e2e::kMemtrace, "peak", "--json", "--layer", "allocated", path});
  nlohmann::json report = e2e::report_json(path);
  for (size_t i = 0; i < reserved["processes"][0]["devices"].size(); ++i) {
    const auto& r = reserved["processes"][0]["devices"][i];
    const auto& a = allocated["processes"][0]["devices"][i];
    const auto& end = report["processes"][0]["devices"][i];
    out.push_back({{"device", r["device"]},
                   {"reserved_peak", r["peak_bytes"]},
                   {"reserved_end", end["live_at_exit_bytes"]},
                   {"allocated_peak", a["peak_bytes"]}});
  }
  return out;
}

void expect_same_figures(const nlohmann::json& want, const nlohmann::json& got) {
  ASSERT_EQ(got.size(), want["devices"].size()) << got.dump();
  for (size_t i = 0; i < got.size(); ++i) {
    const auto& w = want["devices"][i];
    EXPECT_EQ(got[i]["device"], w["device"]);
    EXPECT_EQ(got[i]["reserved_peak"], w["reserved_peak"]) << "device " << w["device"];
    EXPECT_EQ(got[i]["reserved_end"], w["reserved_end"]) << "device " << w["device"];
    EXPECT_EQ(got[i]["allocated_peak"], w["allocated_peak"]) << "device " << w["device"];
  }
}

class RealSnapshot : public ::testing::TestWithParam<std::string> {
 protected:
  std::string path() const { return kData + "/" + GetParam(); }
};

TEST_P(RealSnapshot, FiguresAreTheOnesPyTorchCounts) {
  nlohmann::json want = reference(path());
  ASSERT_FALSE(want.is_discarded());
  expect_same_figures(want, measured(path()));
  nlohmann::json report = e2e::report_json(path());
  const auto& p = report["processes"][0];
  EXPECT_EQ(p["command"][0], path());
  EXPECT_TRUE(p["complete"].get<bool>());
  // What was live before the trace began counts as no call (a snapshot without a trace has none).
  if (p["events"].contains("torch.alloc")) {
    EXPECT_EQ(p["events"]["torch.alloc"]["failed"], 0u);
  }
}

TEST_P(RealSnapshot, EveryAnalysisCommandReadsIt) {
  const std::string dir = e2e::temp_dir("snapshot-commands");
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"report"},
                                             {"peak", "--layer", "allocated"},
                                             {"leaks"},
                                             {"frag"},
                                             {"timeline"},
                                             {"timeline", "--svg", dir + "/t.svg", "--csv", dir + "/t.csv"},
                                             {"snapshot"},
                                             {"check", "--max-peak", "1TiB"},
                                             {"export", "--format", "jsonl", "-o", dir + "/e.jsonl"},
                                             {"export", "--format", "folded", "-o", dir + "/e.folded"},
                                             {"export", "--format", "chrome", "-o", dir + "/e.json"},
                                             {"export", "--format", "memory-viz", "-o", dir + "/e.pickle"}}) {
    std::vector<std::string> argv = {e2e::kMemtrace};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.push_back(path());
    e2e::Result r = e2e::run(argv);
    EXPECT_EQ(r.status, 0) << args[0] << ": " << r.err;
    EXPECT_FALSE(r.out.empty() && args.size() == 1) << args[0];
  }
  e2e::Result diff = e2e::run({e2e::kMemtrace, "diff", path(), path()});
  EXPECT_EQ(diff.status, 0) << diff.err;
  nlohmann::json frag = e2e::command_json({e2e::kMemtrace, "frag", "--json", path()});
  EXPECT_TRUE(frag["processes"][0]["layers_known"].get<bool>()) << frag.dump();
}

// Stacks leave out what PyTorch's own viewer leaves out (the capture, the interpreter's calls, the
// dispatcher's boxing).
TEST_P(RealSnapshot, StacksLeaveOutWhatPyTorchsViewerDoes) {
  nlohmann::json p = e2e::command_json({e2e::kMemtrace, "peak", "--json", "--layer", "allocated", "--by", "stack",
                                        "--top", "50", path()})["processes"][0];
  size_t frames = 0;
  for (const auto& d : p["devices"])
    for (const auto& site : d["sites"])
      for (const auto& f : site["stack"]) {
        ++frames;
        std::string function = f["function"], file = f["file"];
        for (const char* omitted : {"unwind::unwind", "CapturedTraceback::gather", "PyEval_", "PyObject_"})
          EXPECT_EQ(function.find(omitted), std::string::npos) << function;
        for (const char* omitted : {"pythonrun.c", "ceval.c", "core/boxing", "/Register"})
          EXPECT_EQ(file.find(omitted), std::string::npos) << file;
      }
  EXPECT_GT(frames, 0u);
}

// A CI gate people can add today: the peak of reserved memory against a limit.
TEST_P(RealSnapshot, CheckIsACiGate) {
  const uint64_t peak = reference(path())["devices"][0]["reserved_peak"];
  e2e::Result pass = e2e::run({e2e::kMemtrace, "check", "--max-peak", std::to_string(peak), path()});
  EXPECT_EQ(pass.status, 0) << pass.out << pass.err;
  e2e::Result fail = e2e::run({e2e::kMemtrace, "check", "--max-peak", std::to_string(peak - 1), path()});
  EXPECT_EQ(fail.status, 1) << fail.out << fail.err;
  EXPECT_TRUE(contains(fail.out, "FAILED  max-peak")) << fail.out;
}

TEST_P(RealSnapshot, MemoryVizExportIsWhatTheViewerReadsAndReadsBackTheSame) {
  const std::string dir = e2e::temp_dir("memory-viz");
  // PyTorch's own file passes the viewer's rules: the rules are the viewer's, not ours.
  e2e::Result own = e2e::run({MEMTRACE_PYTHON, kViewerCheck, path()});
  EXPECT_EQ(own.status, 0) << own.out << own.err;
  for (const std::string name : {"out.pickle", "out.json"}) {
    const std::string out = dir + "/" + name;
    e2e::Result r = e2e::run({e2e::kMemtrace, "export", "--format", "memory-viz", "-o", out, path()});
    ASSERT_EQ(r.status, 0) << r.err;
    e2e::Result check = e2e::run({MEMTRACE_PYTHON, kViewerCheck, out});
    EXPECT_EQ(check.status, 0) << name << ": " << check.out << check.err;
  }
  nlohmann::json want = reference(path());
  nlohmann::json exported = reference(dir + "/out.pickle");
  for (const char* figure : {"allocated_peak", "allocated_end", "allocated_end_count", "reserved_peak", "reserved_end"})
    EXPECT_EQ(exported["devices"][0][figure], want["devices"][0][figure]) << figure;
  expect_same_figures(want, measured(dir + "/out.pickle"));
}

INSTANTIATE_TEST_SUITE_P(TorchSnapshots, RealSnapshot,
                         ::testing::Values("upto2.0-oom.pickle", "2.1-finetune.pickle", "2.3-attention-backward.pickle",
                                           "2.3-compiled-annotations.pickle"),
                         [](const auto& info) {
                           std::string name = info.param.substr(0, info.param.find(".pickle"));
                           for (char& c : name)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return name;
                         });

TEST(TorchSnapshots, OldSnapshotsSayTheyHaveNoTimes) {
  e2e::Result r = e2e::run({e2e::kMemtrace, "report", kData + "/2.1-finetune.pickle"});
  EXPECT_TRUE(contains(r.out, "records no times")) << r.out;
  EXPECT_TRUE(contains(r.out, "were live before PyTorch began recording")) << r.out;
}

TEST(TorchSnapshots, BackwardAllocationsAreNamedAfterTheirBackwardFunction) {
  // Autograd's thread runs no Python: its sites are named after the backward function, not
  // after PyTorch's allocator.
  nlohmann::json peak = e2e::command_json(
      {e2e::kMemtrace, "peak", "--json", "--layer", "allocated", kData + "/2.3-attention-backward.pickle"});
  const auto& sites = peak["processes"][0]["devices"][0]["sites"];
  ASSERT_FALSE(sites.empty());
  EXPECT_TRUE(contains(sites[0]["location"], "torch::autograd::generated::")) << sites[0]["location"];
  for (const auto& s : sites) EXPECT_FALSE(contains(s["location"], "CUDACachingAllocator")) << s["location"];
}

TEST(TorchSnapshots, ExternalAnnotationsAreRanges) {
  const std::string dir = e2e::temp_dir("annotations");
  ASSERT_EQ(e2e::run({e2e::kMemtrace, "export", "--format", "jsonl", "-o", dir + "/e.jsonl",
                      kData + "/2.3-compiled-annotations.pickle"})
                .status,
            0);
  std::ifstream in(dir + "/e.jsonl");
  size_t starts = 0, ends = 0;
  for (std::string line; std::getline(in, line);) {
    nlohmann::json e = nlohmann::json::parse(line);
    if (e["api"] == "memtrace.range_push" && contains(e.value("name", ""), "(dynamo_timed)")) ++starts;
    if (e["api"] == "memtrace.range_pop") ++ends;
  }
  EXPECT_GT(starts, 0u);
  EXPECT_GT(ends, 0u);
}

// Written as PyTorch 2.3's _snapshot() gives them, with Python's pickle: expandable segments
// (segment_map/unmap), a record_stream free that completes later, an OOM on a second device.
const char* const kExpandable = R"(
import pickle, sys
MiB = 1 << 20
base = 0x7f0000000000
frames = [{'filename': '/home/u/train.py', 'line': 12, 'name': 'forward'},
          {'filename': '??', 'line': 0, 'name': 'at::native::empty_cuda(c10::ArrayRef<long>)'}]
t = [1700000000000000]
def e(action, addr, size, **kw):
    t[0] += 10
    d = {'action': action, 'addr': addr, 'size': size, 'stream': 0, 'time_us': t[0]}
    d.update(kw)
    return d
trace = [
    e('segment_map', base, 20 * MiB, frames=frames),
    e('alloc', base, 8 * MiB, frames=frames),
    e('segment_map', base + 20 * MiB, 20 * MiB, frames=frames),
    e('alloc', base + 8 * MiB, 24 * MiB, frames=frames),
    e('free_requested', base, 8 * MiB),
    e('free_completed', base, 8 * MiB),
    e('segment_map', base + 40 * MiB, 20 * MiB, frames=frames),
    e('alloc', base + 40 * MiB, 4 * MiB, frames=frames),
    e('segment_unmap', base, 8 * MiB),
    e('free_requested', base + 40 * MiB, 4 * MiB),
    e('segment_unmap', base + 44 * MiB, 16 * MiB),
]
trace1 = [e('segment_alloc', 0x7e0000000000, 2 * MiB, frames=frames),
          e('alloc', 0x7e0000000000, 512, frames=frames),
          {'action': 'oom', 'device_free': 123 * MiB, 'size': 512 * MiB, 'stream': 0, 'time_us': t[0] + 5,
           'frames': frames}]
def block(addr, size, state):
    return {'address': addr, 'size': size, 'requested_size': size, 'state': state,
            'frames': frames if state != 'inactive' else []}
segments = [
    {'device': 0, 'address': base + 8 * MiB, 'total_size': 36 * MiB, 'allocated_size': 24 * MiB,
     'active_size': 28 * MiB, 'requested_size': 24 * MiB, 'stream': 0, 'segment_type': 'large',
     'segment_pool_id': (0, 0), 'is_expandable': True, 'frames': frames,
     'blocks': [block(base + 8 * MiB, 24 * MiB, 'active_allocated'), block(base + 32 * MiB, 8 * MiB, 'inactive'),
                block(base + 40 * MiB, 4 * MiB, 'active_pending_free')]},
    {'device': 1, 'address': 0x7e0000000000, 'total_size': 2 * MiB, 'allocated_size': 512, 'active_size': 512,
     'requested_size': 512, 'stream': 0, 'segment_type': 'small', 'segment_pool_id': (0, 0),
     'is_expandable': False, 'frames': frames,
     'blocks': [block(0x7e0000000000, 512, 'active_allocated'), block(0x7e0000000000 + 512, 2 * MiB - 512, 'inactive')]},
]
pickle.dump({'segments': segments, 'device_traces': [trace, trace1], 'external_annotations': []},
            open(sys.argv[1], 'wb'))
)";

class Expandable : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = e2e::temp_dir("expandable");
    path_ = dir_ + "/expandable.pickle";
    std::ofstream(dir_ + "/make.py") << kExpandable;
    e2e::Result r = e2e::run({MEMTRACE_PYTHON, dir_ + "/make.py", path_});
    ASSERT_EQ(r.status, 0) << r.err;
  }
  std::string dir_, path_;
};

TEST_F(Expandable, MappedRangesAreOneSegmentThatGrowsAndShrinks) {
  nlohmann::json want = reference(path_);
  expect_same_figures(want, measured(path_));
  EXPECT_EQ(want["devices"][0]["reserved_peak"], 60u << 20);
  // The three mapped ranges are one heap of 60 MiB at the peak; at the end 36 MiB of it is left,
  // with 8 MiB free in it and 4 MiB waiting for its stream (unmapping split it and cut its end).
  nlohmann::json frag = e2e::command_json({e2e::kMemtrace, "frag", "--json", path_});
  ASSERT_TRUE(frag["processes"][0]["layers_known"].get<bool>()) << frag.dump();
  const auto& at_peak = frag["processes"][0]["points"][0];
  EXPECT_EQ(at_peak["when"], "peak");
  EXPECT_EQ(at_peak["heap_bytes"], 60u << 20);
  EXPECT_EQ(at_peak["free_bytes"], 36u << 20);          // 8 MiB freed at its start, 28 MiB never used
  EXPECT_EQ(at_peak["largest_free_bytes"], 28u << 20);  // the new range joined the free end before it
  const std::string viz = dir_ + "/viz.pickle";
  ASSERT_EQ(e2e::run({e2e::kMemtrace, "export", "--format", "memory-viz", "-o", viz, path_}).status, 0);
  e2e::Result check = e2e::run({MEMTRACE_PYTHON, kViewerCheck, viz});
  EXPECT_EQ(check.status, 0) << check.out << check.err;
  e2e::Result show = e2e::run({MEMTRACE_PYTHON, "-c",
                               "import pickle,sys; s=pickle.load(open(sys.argv[1],'rb')); "
                               "print([(x['device'], x['total_size'] >> 20, [(b['size'] >> 20, b['state']) for b in "
                               "x['blocks']]) for x in s['segments']])",
                               viz});
  EXPECT_TRUE(contains(show.out, "(0, 36, [(24, 'active_allocated'), (8, 'inactive'), (4, 'active_pending_free')])"))
      << show.out;
}

TEST_F(Expandable, PyTorchsOomIsReported) {
  nlohmann::json report = e2e::report_json(path_);
  EXPECT_EQ(report["processes"][0]["events"]["torch.oom"]["failed"], 1u) << report.dump();
  nlohmann::json snapshot = e2e::command_json({e2e::kMemtrace, "snapshot", "--json", path_});
  EXPECT_EQ(snapshot["reason"], "oom");
  EXPECT_EQ(snapshot["device"], 1);
  EXPECT_EQ(snapshot["request"]["size"], 512u << 20);
  EXPECT_EQ(snapshot["device_free_bytes"], 123u << 20);
  EXPECT_EQ(snapshot["request"]["location"], "train.py:12 in forward");
  // Requested bytes: the block waiting for its stream is still active (requested_bytes counts it).
  EXPECT_EQ(snapshot["layers"]["allocated"], 28u * (1u << 20) + 512);
}

// An entry's dict is read straight from the pickle's opcodes: a key given twice counts as the
// dict Python builds keeps it, the last value, whatever its kind (written by hand: Python's
// pickler never repeats a key).
TEST(TorchSnapshots, AKeyGivenTwiceCountsAsPythonsDictKeepsIt) {
  const std::string dir = e2e::temp_dir("key-twice");
  const std::string path = dir + "/twice.pickle";
  e2e::Result made = e2e::run({MEMTRACE_PYTHON, "-c", R"(
import pickle, struct, sys
def s(x):
    return b'\x8c' + bytes([len(x)]) + x.encode()
def i(n):
    return b'\x8a\x08' + struct.pack('<q', n)
def entry(*kv):
    return b'}(' + b''.join(kv) + b'u'
e1 = entry(s('action'), s('alloc'), s('addr'), i(4096), s('size'), i(512), s('time_us'), i(1))
e2 = entry(s('action'), s('alloc'), s('addr'), i(8192), s('size'), i(512), s('size'), s('?'), s('time_us'), i(2))
e3 = entry(s('action'), s('alloc'), s('action'), b'N', s('addr'), i(12288), s('size'), i(64), s('time_us'), i(3))
data = b'\x80\x04}(' + s('segments') + b']' + s('device_traces') + b'](](' + e1 + e2 + e3 + b'eeu.'
assert pickle.loads(data)['device_traces'][0][1]['size'] == '?'
open(sys.argv[1], 'wb').write(data)
)",
                               path});
  ASSERT_EQ(made.status, 0) << made.err;
  e2e::Result r = e2e::run({e2e::kMemtrace, "export", "--format", "jsonl", path});
  ASSERT_EQ(r.status, 0) << r.err;
  std::vector<std::pair<uint64_t, uint64_t>> allocs;  // addr, size
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    nlohmann::json e = nlohmann::json::parse(line);
    if (e["api"] == "torch.alloc") allocs.emplace_back(e["addr"], e["size"]);
  }
  // The second's size is no number; the third's action is None: no entry.
  EXPECT_EQ(allocs, (std::vector<std::pair<uint64_t, uint64_t>>{{4096, 512}, {8192, 0}}));
}

TEST(TorchSnapshots, BadPicklesGetOneSentence) {
  const std::string dir = e2e::temp_dir("bad-pickles");
  struct Case {
    std::string name, python, says;
  };
  for (const Case& c : std::vector<Case>{
           {"object", "import pickle, datetime; pickle.dump({'segments': [datetime.date.today()]}, f)",
            "imports a Python object"},
           {"not-a-snapshot", "import pickle; pickle.dump({'weights': [1, 2]}, f)", "not a PyTorch memory snapshot"},
           {"bad-segment", "import pickle; pickle.dump({'segments': [{'address': 1}]}, f)",
            "segment 0 has no 'address' or 'total_size'"},
           {"cut", "import pickle; f.write(pickle.dumps({'segments': [], 'device_traces': [[]]})[:-3])",
            "ends before its STOP"}}) {
    const std::string path = dir + "/" + c.name + ".pickle";
    e2e::Result made = e2e::run({MEMTRACE_PYTHON, "-c", "f = open('" + path + "', 'wb')\n" + c.python});
    ASSERT_EQ(made.status, 0) << made.err;
    for (const char* command : {"report", "peak", "snapshot"}) {
      e2e::Result r = e2e::run({e2e::kMemtrace, command, path});
      EXPECT_EQ(r.status, 2) << c.name << " " << command;
      EXPECT_TRUE(contains(r.err, c.says)) << c.name << " " << command << ": " << r.err;
      EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    }
  }
}

// A snapshot is read as it streams past (two passes over the file, neither holding the traces):
// many batches of entries on several devices, merged in time, with blocks and segments live
// before the trace began, give the figures PyTorch counts.
TEST(LargeSnapshots, ManyBatchesOnSeveralDevicesGiveTheFiguresPyTorchCounts) {
  const std::string dir = e2e::temp_dir("many-batches");
  const std::string path = dir + "/three-devices.pickle";
  e2e::Result made = e2e::run(
      {MEMTRACE_PYTHON, MEMTRACE_E2E_SOURCE "/make_snapshot.py", path, "--devices", "3", "--entries", "20000"});
  ASSERT_EQ(made.status, 0) << made.err;
  nlohmann::json want = reference(path);
  ASSERT_FALSE(want.is_discarded());
  ASSERT_EQ(want["devices"].size(), 3u);
  for (const auto& d : want["devices"]) ASSERT_GT(d["events"].get<int>(), 15000) << "entries in many batches";
  expect_same_figures(want, measured(path));
  nlohmann::json p = e2e::report_json(path)["processes"][0];
  EXPECT_TRUE(p["complete"].get<bool>());
  EXPECT_EQ(p["unmatched_frees"], 0);
  // Merged in time: no device's events all before another's.
  std::vector<nlohmann::json> events;
  e2e::Result jsonl = e2e::run({e2e::kMemtrace, "export", "--format", "jsonl", path});
  ASSERT_EQ(jsonl.status, 0) << jsonl.err;
  std::istringstream lines(jsonl.out);
  uint64_t last_t = 0, switches = 0;
  int last_device = -1;
  for (std::string line; std::getline(lines, line);) {
    nlohmann::json e = nlohmann::json::parse(line);
    EXPECT_GE(e["t_ns"].get<uint64_t>(), last_t);
    last_t = e["t_ns"];
    if (e["device"].get<int>() != last_device) ++switches;
    last_device = e["device"];
  }
  EXPECT_GT(switches, 100u);
}

// Runs ARGV with its output to the file OUT; its exit status and the most memory it held (KiB).
// Started by a small Python process, not forked from this one: a child's peak counts the pages it
// shares with its parent when forked (Linux keeps the high-water mark across exec), and this
// process may hold hundreds of MiB after other tests of the same run.
std::pair<int, long> run_measured(const std::vector<std::string>& argv, const std::string& out) {
  std::vector<std::string> command = {MEMTRACE_PYTHON, "-c",
                                      "import resource, subprocess, sys\n"
                                      "with open(sys.argv[1], 'wb') as out:\n"
                                      "    status = subprocess.run(sys.argv[2:], stdout=out).returncode\n"
                                      "print(status, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n",
                                      out};
  command.insert(command.end(), argv.begin(), argv.end());
  e2e::Result r = e2e::run(command);
  int status = -1;
  long max_kib = -1;
  std::istringstream(r.out) >> status >> max_kib;
  return {r.status == 0 ? status : 128, max_kib};
}

// People's snapshots run to gigabytes: one is read in the memory docs/snapshots.md states (made here by
// exporting a generated recording; nothing stored).
// A snapshot is imported by a thread of its own into a pipe while it is read. A reader that goes
// before the end lets that thread go: it neither waits on the full pipe nor dies of SIGPIPE (this
// test would hang, or die with it); one that reads to the end gets the whole trace.
TEST(LargeSnapshots, AReaderThatStopsEarlyLetsTheImportGo) {
  const std::string dir = e2e::temp_dir("stops-early");
  const std::string path = dir + "/snapshot.pickle";
  e2e::Result made = e2e::run({MEMTRACE_PYTHON, MEMTRACE_E2E_SOURCE "/make_snapshot.py", path, "--entries", "20000"});
  ASSERT_EQ(made.status, 0) << made.err;
  for (int read : {0, 1, 5000}) {
    std::string error;
    // Through a path that is gone once the reader is open: the import's thread keeps its own.
    std::unique_ptr<memtrace::TraceReader> reader = memtrace::open_trace(std::string(path), error);
    ASSERT_TRUE(reader) << error;
    memtrace::Event event;
    for (int i = 0; i < read; ++i) ASSERT_TRUE(reader->next(event)) << i;
  }
  std::string error;
  std::unique_ptr<memtrace::TraceReader> reader = memtrace::open_trace(path, error);
  ASSERT_TRUE(reader) << error;
  memtrace::Event event;
  uint64_t events = 0;
  while (reader->next(event)) ++events;
  EXPECT_TRUE(reader->footer().has_value()) << reader->problem();
  EXPECT_EQ(reader->footer()->events(), events);
  EXPECT_GT(events, 20000u);
}

TEST(LargeSnapshots, AGigabyteSnapshotIsReadInBoundedMemory) {
  const std::string generator = MEMTRACE_BUILD_DIR "/bin/trace_generator";
  if (!fs::exists(generator)) GTEST_SKIP() << "trace_generator is built with the benchmarks (MEMTRACE_BUILD_BENCH)";
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  const uint64_t entries = 1'000'000;  // the sanitizers' build reads many times slower: the same, smaller
#else
  const uint64_t entries = 20'000'000;
#endif
  const std::string dir = e2e::temp_dir("gigabyte-snapshot");
  const std::string trace = dir + "/recording.memtrace", pickle = dir + "/snapshot.pickle";
  e2e::Result made = e2e::run({generator, trace, "--events", std::to_string(2 * entries), "--live", "20000"});
  ASSERT_EQ(made.status, 0) << made.err;
  e2e::Result exported = e2e::run({e2e::kMemtrace, "export", "--format", "memory-viz", "--max-entries",
                                   std::to_string(entries), "-o", pickle, trace});
  ASSERT_EQ(exported.status, 0) << exported.err;
  fs::remove(trace);
  const uint64_t size = fs::file_size(pickle);
  EXPECT_GT(size, entries * 45) << "about 50 bytes an entry";
  auto [status, max_kib] = run_measured({e2e::kMemtrace, "report", "--json", pickle}, dir + "/report.json");
  ASSERT_EQ(status, 0);
  std::cout << "memtrace report of a " << size / (1 << 20) << " MiB snapshot: at most " << max_kib / 1024
            << " MiB in memory\n";
  // docs/snapshots.md: "memory stays under 256 MiB whatever the file's size" (this one: about 64 MiB), where
  // reading it whole took 8 times the file.
  EXPECT_LT(max_kib, 256 * 1024) << "of a " << size / (1 << 20) << " MiB snapshot";
  nlohmann::json p = nlohmann::json::parse(std::ifstream(dir + "/report.json"))["processes"][0];
  EXPECT_TRUE(p["complete"].get<bool>());
  EXPECT_GE(p["events_total"].get<uint64_t>(), entries);
  fs::remove(pickle);
}

// A recording exports too: the reserved layer alone (each allocation a segment of one block), or
// the allocated layer an allocator described through NVTX.
TEST(MemoryViz, RecordingsExportWhatTheViewerReads) {
  const std::string dir = e2e::temp_dir("viz-recorded");
  ASSERT_EQ(e2e::run_sample(dir + "/train", "train_loop").status, 0);
  ASSERT_EQ(e2e::run_traced(dir + "/steps",
                            {"/usr/bin/env", "MEMTRACE_SIM_CONTEXT_BYTES=0", e2e::sample_path("steps"), "--fragment"},
                            {"--sim-capacity", "64MiB"})
                .status,
            0);
  for (const std::string run : {"train", "steps"}) {
    const std::string viz = dir + "/" + run + ".pickle";
    e2e::Result r =
        e2e::run({e2e::kMemtrace, "export", "--format", "memory-viz", "-o", viz, dir + "/" + run + "/traces"});
    ASSERT_EQ(r.status, 0) << r.err;
    e2e::Result check = e2e::run({MEMTRACE_PYTHON, kViewerCheck, viz});
    EXPECT_EQ(check.status, 0) << run << ": " << check.out << check.err;
    // Read back, the export has the recording's peak of the layer it describes.
    const char* layer = run == "train" ? "reserved" : "allocated";
    uint64_t recorded = e2e::command_json({e2e::kMemtrace, "peak", "--json", "--layer", layer,
                                           dir + "/" + run + "/traces"})["processes"][0]["devices"][0]["peak_bytes"];
    uint64_t exported = e2e::command_json(
        {e2e::kMemtrace, "peak", "--json", "--layer", "allocated", viz})["processes"][0]["devices"][0]["peak_bytes"];
    EXPECT_EQ(exported, recorded) << run;
  }
  e2e::Result several = e2e::run({e2e::kMemtrace, "export", "--format", "memory-viz", "-o", dir + "/x.pickle",
                                  dir + "/train/traces", "--max-entries", "10"});
  EXPECT_EQ(several.status, 0) << several.err;
  EXPECT_TRUE(contains(several.err, "kept the last 10 of")) << several.err;
  e2e::Result no_output = e2e::run({e2e::kMemtrace, "export", "--format", "memory-viz", dir + "/train/traces"});
  EXPECT_EQ(no_output.status, 2);
  EXPECT_TRUE(contains(no_output.err, "needs -o FILE")) << no_output.err;
}

}  // namespace
