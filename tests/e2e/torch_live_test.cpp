// PyTorch as PyTorch users see it, recorded live: a training loop (samples/python/torch_train.py,
// which runs unchanged on a GPU with PyTorch) on the simulated device with memtrace's stand-in
// PyTorch (sim/torch: a caching allocator with trace trackers, its classes laid out and
// exported as PyTorch's are, its ops releasing the GIL). The allocated layer must have PyTorch's
// own figures to the byte, with and without expandable segments; steps come from the optimizer
// with no flag; parameters, gradients and optimizer state are told apart; the leak and the OOM
// are found with their lines; an allocator memtrace cannot read, or one the program replaced,
// leaves the reserved layer and one notice, and the program's results unchanged. Debian's
// CPU-only PyTorch runs unharmed with nothing recorded.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "harness.h"
#include "memtrace/base/units.h"

namespace {

namespace fs = std::filesystem;

const std::string kStandIn = MEMTRACE_SIM_DIR "/torch/site-packages";
const std::string kScript = e2e::python_sample_path("torch_train.py");

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// `memtrace run --sim` of torch_train.py ARGS with the stand-in PyTorch importable.
e2e::Result train(const std::string& dir, const std::vector<std::string>& args, std::vector<std::string> env = {},
                  const std::vector<std::string>& options = {}, const std::string& python = MEMTRACE_PYTHON) {
  std::vector<std::string> argv{e2e::kMemtrace, "run", "--sim", "-o", dir + "/traces"};
  argv.insert(argv.end(), options.begin(), options.end());
  argv.insert(argv.end(), {"--", python, kScript});
  argv.insert(argv.end(), args.begin(), args.end());
  env.push_back("PYTHONPATH=" + kStandIn);
  return e2e::run(argv, env);
}

nlohmann::json account(const e2e::Result& r) {
  auto accounts = e2e::sample_accounts(r.out);
  EXPECT_EQ(accounts.size(), 1u) << r.out << r.err;
  return accounts.empty() ? nlohmann::json() : accounts.begin()->second;
}

nlohmann::json peak(const std::string& path, const std::string& layer, const std::string& by = "user") {
  return e2e::command_json({e2e::kMemtrace, "peak", "--json", "--layer", layer, "--by", by, path});
}

constexpr uint64_t kMiB = 1 << 20;

class TorchTraining : public ::testing::TestWithParam<bool> {  // expandable segments or not
 protected:
  void SetUp() override {
    dir_ = e2e::temp_dir(GetParam() ? "torch-expandable" : "torch");
    std::vector<std::string> env;
    if (GetParam()) env.push_back("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True");
    run_ = train(dir_, {"--steps", "6", "--leak"}, env);
    ASSERT_EQ(run_.status, 0) << run_.err;
    account_ = account(run_);
  }
  std::string traces() const { return dir_ + "/traces"; }
  std::string dir_;
  e2e::Result run_;
  nlohmann::json account_;
};

TEST_P(TorchTraining, PeaksArePyTorchsToTheByte) {
  const nlohmann::json allocated = peak(traces(), "allocated")["processes"][0]["devices"][0];
  const nlohmann::json reserved = peak(traces(), "reserved")["processes"][0]["devices"][0];
  EXPECT_EQ(allocated["peak_bytes"], account_["max_memory_requested"]);  // requested bytes, not blocks
  EXPECT_EQ(reserved["peak_bytes"], account_["max_memory_reserved"]);
  nlohmann::json report = e2e::report_json(traces());
  const auto& events = report["processes"][0]["events"];
  if (GetParam()) {
    EXPECT_GT(events["torch.segment_map"]["calls"], 0u) << events.dump();
    EXPECT_GT(events["cuMemMap"]["calls"], 0u);
  } else {
    EXPECT_EQ(events["torch.segment_alloc"]["calls"], events["cudaMalloc"]["calls"]);
  }
  // Everything went by the end but cuBLAS's workspace, which PyTorch keeps for the process's life
  // (CublasHandlePool.cpp: one per handle and stream, freed only by clearCublasWorkspaces).
  EXPECT_EQ(events["torch.alloc"]["calls"].get<uint64_t>(), events["torch.free"]["calls"].get<uint64_t>() + 1);
  for (const auto& notice : report["processes"][0]["notices"]) ADD_FAILURE() << notice;
}

TEST_P(TorchTraining, StepsComeFromTheOptimizerWithNoFlag) {
  nlohmann::json report = e2e::report_json(traces());
  EXPECT_EQ(report["processes"][0]["events"]["memtrace.mark"]["calls"], 6u);
  EXPECT_EQ(peak(traces(), "allocated")["processes"][0]["steps"], 6u);
}

TEST_P(TorchTraining, TheLeakIsFoundWithItsLine) {
  nlohmann::json leaks = e2e::command_json({e2e::kMemtrace, "leaks", "--json", traces()});
  const auto& p = leaks["processes"][0];
  EXPECT_EQ(p["layer"], "allocated");
  ASSERT_EQ(p["growth"].size(), 1u) << p["growth"].dump(1);  // the caching allocator's own growth is no leak
  const auto& g = p["growth"][0];
  EXPECT_EQ(g["bytes_per_step"], 1 * kMiB);
  EXPECT_EQ(g["location"], "torch_train.py:" + std::to_string(e2e::marked_line(kScript, "leak")) + " in main");
}

TEST_P(TorchTraining, CategoriesAtThePeak) {
  const int w = 1024;
  const uint64_t params = 2ull * w * 4 * w * 4;  // two w x 4w float32 weights
  nlohmann::json p = peak(traces(), "allocated", "category")["processes"][0];
  EXPECT_TRUE(p["categories_known"].get<bool>());
  std::map<std::string, uint64_t> bytes;
  for (const auto& c : p["devices"][0]["categories"]) bytes[c["category"]] = c["bytes"];
  EXPECT_EQ(bytes["parameter"], params);
  EXPECT_EQ(bytes["gradient"], params);
  EXPECT_EQ(bytes["optimizer_state"], 2 * params);  // AdamW's two moments
  EXPECT_GT(bytes["other"], 0u);                    // the kept tensors
  uint64_t total = 0;
  for (const auto& [name, b] : bytes) total += b;
  EXPECT_EQ(total, p["devices"][0]["peak_bytes"]);
  e2e::Result text = e2e::run({e2e::kMemtrace, "peak", "--by", "category", traces()});
  EXPECT_TRUE(contains(text.out, "optimizer_state")) << text.out;
  // peak of the allocated layer by site says them too; of the reserved layer, which leaves them
  // out (AnalysisOptions::categories), it still says they are known.
  nlohmann::json by_site = peak(traces(), "allocated")["processes"][0];
  EXPECT_EQ(by_site["devices"][0]["categories"], p["devices"][0]["categories"]);
  EXPECT_TRUE(peak(traces(), "reserved")["processes"][0]["categories_known"].get<bool>());
  // explain holds each category against the formulas' component.
  nlohmann::json x = e2e::command_json({e2e::kMemtrace, "explain", "--json", "--model", "gpt2", traces()});
  EXPECT_TRUE(x["categories_known"].get<bool>());
  std::map<std::string, nlohmann::json> rows;
  for (const auto& row : x["measured"][0]["categories"]) rows[row["category"]] = row;
  EXPECT_EQ(rows["parameter"]["measured_bytes"], params);
  EXPECT_TRUE(rows["parameter"]["expected_bytes"].is_number());
  EXPECT_TRUE(rows["other"]["expected_bytes"].is_null());
  EXPECT_EQ(x["measured"][0]["layers"]["allocated"], p["devices"][0]["peak_bytes"]);
}

TEST_P(TorchTraining, AllocationsCarryThePythonLineOfATensorMadeWithoutTheGil) {
  // The stand-in's ops release the GIL (ctypes.CDLL), as PyTorch's do: the forward's line is there.
  nlohmann::json p = peak(traces(), "allocated")["processes"][0];
  std::string locations;
  for (const auto& s : p["devices"][0]["sites"]) locations += s["location"].get<std::string>() + "\n";
  EXPECT_TRUE(contains(locations, "torch_train.py:" + std::to_string(e2e::marked_line(kScript, "input")) + " in main"))
      << locations;
  EXPECT_FALSE(contains(locations, "sitecustomize.py")) << locations;  // memtrace's shim is never shown
  EXPECT_FALSE(contains(locations, "site-packages")) << locations;
}

TEST_P(TorchTraining, MemoryVizExportHasTheCategories) {
  const std::string viz = dir_ + "/viz.pickle";
  ASSERT_EQ(e2e::run({e2e::kMemtrace, "export", "--format", "memory-viz", "-o", viz, traces()}).status, 0);
  e2e::Result check = e2e::run({MEMTRACE_PYTHON, MEMTRACE_E2E_SOURCE "/memory_viz_check.py", viz});
  EXPECT_EQ(check.status, 0) << check.out << check.err;
  e2e::Result categories = e2e::run({MEMTRACE_PYTHON, "-c",
                                     "import pickle,sys; s=pickle.load(open(sys.argv[1],'rb')); "
                                     "print(sorted({e.get('category','') for t in s['device_traces'] for e in t}))",
                                     viz});
  EXPECT_TRUE(contains(categories.out, "'parameter'")) << categories.out;
  EXPECT_TRUE(contains(categories.out, "'unknown'")) << categories.out;
  // Read back, it has the recording's peaks and categories.
  EXPECT_EQ(peak(viz, "allocated")["processes"][0]["devices"][0]["peak_bytes"], account_["max_memory_requested"]);
  nlohmann::json again = peak(viz, "allocated", "category")["processes"][0]["devices"][0]["categories"];
  nlohmann::json first = peak(traces(), "allocated", "category")["processes"][0]["devices"][0]["categories"];
  EXPECT_EQ(again, first);
}

INSTANTIATE_TEST_SUITE_P(Torch, TorchTraining, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "expandable_segments" : "segments"; });

TEST(TorchOom, PyTorchsOutOfMemoryIsTheSnapshotWithItsLine) {
  const std::string dir = e2e::temp_dir("torch-oom");
  e2e::Result r = train(dir, {"--steps", "2", "--oom"}, {}, {"--sim-capacity", "2GiB"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(account(r)["oom_caught"].get<bool>());  // the exception reached the program unchanged
  std::vector<std::string> snapshots;
  for (const auto& entry : fs::directory_iterator(dir + "/traces"))
    if (entry.path().extension() == ".memsnap") snapshots.push_back(entry.path().string());
  // PyTorch's failed cudaMalloc calls, which it answers by emptying its cache and trying again,
  // are not the program's OOM: one snapshot, PyTorch's.
  ASSERT_EQ(snapshots.size(), 1u);
  nlohmann::json s = e2e::command_json({e2e::kMemtrace, "snapshot", "--json", snapshots[0]});
  EXPECT_EQ(s["reason"], "oom");
  EXPECT_EQ(s["request"]["api"], "torch.oom");
  EXPECT_EQ(s["request"]["size"], 4ull << 40);  // 2^40 floats
  EXPECT_EQ(s["request"]["location"],
            "torch_train.py:" + std::to_string(e2e::marked_line(kScript, "oom")) + " in main");
  EXPECT_GT(s["device_free_bytes"].get<uint64_t>(), 0u);
  EXPECT_EQ(s["device_total_bytes"], 2ull << 30);
  EXPECT_EQ(s["layers"]["allocated"], account(r)["memory_requested"]);
  EXPECT_EQ(s["layers"]["reserved"], account(r)["memory_reserved"]);
  EXPECT_TRUE(contains(s["sites"][0]["location"], "torch_train.py:")) << s["sites"].dump(1);
}

// What memtrace cannot read, it leaves: one notice, the reserved layer, the program unchanged.
TEST(TorchUnread, AReplacedAllocatorLeavesTheReservedLayerAndOneNotice) {
  const std::string dir = e2e::temp_dir("torch-pluggable");
  const std::string script = dir + "/pluggable.py";
  // As PyTorch's documentation replaces the allocator: a library's alloc and free functions.
  std::ofstream(script) << "import torch, runpy, sys\n"
                           "allocator = torch.cuda.memory.CUDAPluggableAllocator(\n"
                           "    '" MEMTRACE_SAMPLES_DIR
                           "/libtorch_allocator.so', 'direct_alloc', 'direct_free')\n"
                           "torch.cuda.memory.change_current_allocator(allocator)\n"
                           "sys.argv = sys.argv[1:]\n"
                           "runpy.run_path(sys.argv[0], run_name='__main__')\n";
  std::vector<std::string> argv{e2e::kMemtrace, "run",   "--sim",   "-o", dir + "/traces", "--", MEMTRACE_PYTHON,
                                script,         kScript, "--steps", "2"};
  e2e::Result r = e2e::run(argv, {"PYTHONPATH=" + kStandIn});
  ASSERT_EQ(r.status, 0) << r.err;
  nlohmann::json report = e2e::report_json(dir + "/traces");
  const auto& p = report["processes"][0];
  EXPECT_FALSE(p["events"].contains("torch.alloc")) << p["events"].dump();
  EXPECT_GT(p["events"]["cudaMalloc"]["calls"], 10u);  // a cudaMalloc per tensor, from the library
  ASSERT_EQ(p["notices"].size(), 1u) << p["notices"].dump();
  EXPECT_TRUE(contains(p["notices"][0], "replaced PyTorch's allocator")) << p["notices"][0];
}

TEST(TorchUnread, EventsThatDoNotMatchTheReservedMemoryAreNotRecorded) {
  const std::string dir = e2e::temp_dir("torch-skewed");
  // The stand-in reports its segments 512 bytes off, as a TraceEntry of another layout would read.
  e2e::Result r = train(dir, {"--steps", "2"}, {"SIM_TORCH_SKEW_SEGMENTS=512"});
  ASSERT_EQ(r.status, 0) << r.err;
  nlohmann::json report = e2e::report_json(dir + "/traces");
  const auto& p = report["processes"][0];
  EXPECT_FALSE(p["events"].contains("torch.alloc")) << p["events"].dump();
  EXPECT_GT(p["events"]["cudaMalloc"]["calls"], 0u);
  ASSERT_EQ(p["notices"].size(), 1u) << p["notices"].dump();
  EXPECT_TRUE(contains(p["notices"][0], "does not read this version's allocator events right")) << p["notices"][0];
  EXPECT_EQ(account(r)["max_memory_allocated"].get<uint64_t>() > 0, true);
}

// Debian's PyTorch has no CUDA: the shim finds torch, attaches to nothing, breaks nothing.
TEST(TorchCpuOnly, DebiansPyTorchRunsUnchangedAndNothingIsRecorded) {
  e2e::Result has = e2e::run({"/usr/bin/python3", "-c", "import torch; print(torch.__version__)"});
  ASSERT_EQ(has.status, 0) << "Debian's python3-torch is not installed (scripts/setup installs it): " << has.err;
  const std::string dir = e2e::temp_dir("torch-cpu");
  const char* program =
      "import torch\n"
      "torch.manual_seed(0)\n"
      "m = torch.nn.Linear(8, 4)\n"
      "opt = torch.optim.AdamW(m.parameters())\n"
      "for _ in range(3):\n"
      "    loss = m(torch.ones(2, 8)).sum()\n"
      "    loss.backward()\n"
      "    opt.step()\n"
      "    opt.zero_grad()\n"
      "print('cuda', torch.cuda.is_available(), 'loss', round(float(loss), 4))\n";
  e2e::Result bare = e2e::run({"/usr/bin/python3", "-c", program});
  ASSERT_EQ(bare.status, 0) << bare.err;
  e2e::Result traced =
      e2e::run({e2e::kMemtrace, "run", "-o", dir + "/traces", "--", "/usr/bin/python3", "-c", program});
  EXPECT_EQ(traced.status, 0) << traced.err;
  EXPECT_EQ(traced.out, bare.out);
  EXPECT_TRUE(contains(traced.err, "never used CUDA")) << traced.err;
  EXPECT_FALSE(fs::exists(dir + "/traces"));
  // The shim did see this torch: its backward hook is in place (1.13 has no optimizer hooks yet).
  e2e::Result hooked = e2e::run({e2e::kMemtrace, "run", "-o", dir + "/traces", "--", "/usr/bin/python3", "-c",
                                 "import torch\nprint(getattr(torch.autograd.backward, '_memtrace', False))\n"});
  EXPECT_EQ(hooked.out, "True\n") << hooked.err;
}

// The stand-in on every CPython here: the tracker's events carry each one's Python frames.
class TorchOnEveryPython : public ::testing::TestWithParam<e2e::Python> {};

TEST_P(TorchOnEveryPython, TheAllocatedLayerIsRecorded) {
  const std::string dir = e2e::temp_dir("torch-python");
  e2e::Result r = train(dir, {"--steps", "3", "--width", "256"}, {}, {}, GetParam().path);
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json d = peak(dir + "/traces", "allocated")["processes"][0]["devices"][0];
  EXPECT_EQ(d["peak_bytes"], account(r)["max_memory_requested"]);
  EXPECT_TRUE(contains(d["sites"][0]["location"], "torch_train.py:")) << d["sites"].dump(1);
}

INSTANTIATE_TEST_SUITE_P(CPython, TorchOnEveryPython, ::testing::ValuesIn(e2e::readable_pythons()),
                         [](const auto& info) {
                           return (info.param.path.rfind("/usr/", 0) == 0 ? "system_3_" : "pyenv_3_") +
                                  std::to_string(info.param.minor);
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(TorchOnEveryPython);

// PROGRAM, run by Python with the stand-in PyTorch under memtrace run --sim, its traces in DIR/traces.
e2e::Result run_with_stand_in(const std::string& dir, const std::string& program) {
  return e2e::run({e2e::kMemtrace, "run", "--sim", "-o", dir + "/traces", "--", MEMTRACE_PYTHON, "-c", program},
                  {"PYTHONPATH=" + kStandIn});
}

// What PyTorch's cache keeps is no leak, for every command alike: a tensor freed leaves its segment
// cached, and check --max-leaked 0 passes as memtrace leaks says 0 B in tensors; the HTML's growth
// table holds the tensors' growth, not the cache filling up.
TEST(TorchLeaks, TheCacheIsNoLeakForCheckAndTheHtml) {
  const std::string dir = e2e::temp_dir("torch-cache-no-leak");
  e2e::Result r =
      run_with_stand_in(dir,
                        "import torch, memtrace\n"
                        "y = torch.empty(1, device='cuda')  # CUDA in use: the steps are recorded from here\n"
                        "del y\n"
                        "for step in range(5):\n"
                        "    memtrace.step()\n"
                        "    x = torch.empty(1 << (18 + step), device='cuda')  # a bigger segment every step\n"
                        "    del x\n");
  ASSERT_EQ(r.status, 0) << r.err;
  e2e::Result leaks = e2e::run({e2e::kMemtrace, "leaks", "--json", dir + "/traces"});
  ASSERT_EQ(leaks.status, 0) << leaks.err;
  EXPECT_EQ(nlohmann::json::parse(leaks.out)["live_at_exit_bytes"], 0) << leaks.out;
  e2e::Result check = e2e::run({e2e::kMemtrace, "check", "--max-leaked", "0", dir + "/traces"});
  EXPECT_EQ(check.status, 0) << check.out << check.err;
  nlohmann::json l = nlohmann::json::parse(leaks.out)["processes"][0];
  EXPECT_EQ(l["steps"], 5) << l.dump();  // memtrace.step() from Python
  EXPECT_TRUE(l["growth"].empty()) << l.dump();
  e2e::Result html = e2e::run({e2e::kMemtrace, "html", dir + "/traces", "-o", dir + "/report.html"});
  ASSERT_EQ(html.status, 0) << html.err;
  std::ifstream in(dir + "/report.html");
  const std::string page((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(contains(page, "\"growth\":[]")) << "the cache's growth is in the page's growth table";
}

// The stand-in's allocator as PyTorch's under threads that free what another may take at once
// (a data loader's): every free lands, so PyTorch's own account ends at 0 (a free lost to the
// race made Attach.APyTorchTrainingWithThreads flake, 64 KiB off).
TEST(TorchStandIn, ThreadsFreeingAndTakingTheSameBlocksLoseNoFree) {
  const std::string dir = e2e::temp_dir("torch-threads-free");
  e2e::Result r = run_with_stand_in(dir,
                                    "import threading, torch\n"
                                    "def work():\n"
                                    "    for _ in range(3000):\n"
                                    "        t = torch.empty(16 * 1024, device='cuda')\n"
                                    "        del t\n"
                                    "threads = [threading.Thread(target=work) for _ in range(4)]\n"
                                    "for t in threads: t.start()\n"
                                    "for t in threads: t.join()\n"
                                    "print('allocated', torch.cuda.memory_allocated())\n");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "allocated 0\n")) << r.out;
  EXPECT_FALSE(contains(r.err, "invalid device pointer")) << r.err;
  e2e::Result leaks = e2e::run({e2e::kMemtrace, "leaks", "--json", dir + "/traces"});
  ASSERT_EQ(leaks.status, 0) << leaks.err;
  EXPECT_EQ(nlohmann::json::parse(leaks.out)["live_at_exit_bytes"], 0) << leaks.out;
}

}  // namespace

// frag answers "would expandable_segments help?" in one sentence, measures free space only while
// the program still allocates (not while Python frees everything at exit), and diff of a run with
// and without expandable segments says in words what changed (issue 31, item 4).
TEST(TorchFragmentation, ExpandableSegmentsInWords) {
  const std::string dir = e2e::temp_dir("torch-frag");
  ASSERT_EQ(train(dir + "/off", {"--steps", "4"}).status, 0);
  ASSERT_EQ(train(dir + "/on", {"--steps", "4"}, {"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"}).status, 0);
  const std::string off = dir + "/off/traces", on = dir + "/on/traces";

  e2e::Result frag_off = e2e::run({e2e::kMemtrace, "frag", off});
  EXPECT_TRUE(contains(frag_off.out, "\n  Would expandable_segments help? Little: at the peak ")) << frag_off.out;
  e2e::Result frag_on = e2e::run({e2e::kMemtrace, "frag", on});
  EXPECT_TRUE(contains(frag_on.out, "Would expandable_segments help? It is on in this run")) << frag_on.out;

  // After the last allocation the program only frees: the free space then is not what it met.
  nlohmann::json j = e2e::command_json({e2e::kMemtrace, "frag", "--json", off})["processes"][0];
  // Each point is a bucket's highest: those that end by the last allocation are before it (a
  // bucket holding the last allocation may hold the frees after it too, at any speed of the run).
  const uint64_t last_alloc = j["last_alloc_ns"];
  const auto& points = j["free_in_heaps"][0]["points"];
  ASSERT_GT(points.size(), 1u);
  const uint64_t width = points[1][0].get<uint64_t>() - points[0][0].get<uint64_t>();
  uint64_t most = 0, most_at = 0, most_before = 0;
  for (const auto& point : points) {
    if (point[1] > most) most = point[1], most_at = point[0];
    if (point[0].get<uint64_t>() + width <= last_alloc) most_before = std::max<uint64_t>(most_before, point[1]);
  }
  EXPECT_GT(last_alloc, width);
  EXPECT_GT(most_at + width, last_alloc) << "the freeing at exit leaves the most free, after the last allocation";
  EXPECT_LT(most_before, most) << "what the program met while it allocated is less than all it freed at its end";
  EXPECT_TRUE(contains(frag_off.out, "peaked at " + memtrace::format_bytes(most_before) + " around ")) << frag_off.out;
  EXPECT_TRUE(contains(frag_off.out, ", up to its last allocation at ")) << frag_off.out;

  e2e::Result diff = e2e::run({e2e::kMemtrace, "diff", off, on});
  EXPECT_TRUE(contains(diff.out, "The new run's peak of reserved memory is ")) << diff.out;
  EXPECT_TRUE(contains(diff.out,
                       "The new run uses expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) "
                       "and the baseline does not: free inside PyTorch's segments at the peak went from "))
      << diff.out;
  EXPECT_FALSE(contains(diff.out, "What grew most")) << diff.out;  // its sites differ by API, not by growth
  nlohmann::json words = e2e::command_json({e2e::kMemtrace, "diff", "--json", on, off})["summary"];
  ASSERT_GE(words.size(), 2u) << words.dump(2);
  EXPECT_TRUE(contains(words[1], "The baseline uses expandable segments")) << words.dump(2);
}

// A snapshot's blocks that predate its history are in their segments from the start: the peak's
// free space is what the segments did not hold, not the whole of them (a 2.1 fine-tune read
// "index 0.96, 0 B allocated" when every block was placed after every segment).
TEST(TorchFragmentation, ASnapshotsEarlyBlocksAreInTheirSegmentsFromTheStart) {
  const std::string pickle = std::string(MEMTRACE_TEST_DATA) + "/torch/2.1-finetune.pickle";
  nlohmann::json j = e2e::command_json({e2e::kMemtrace, "frag", "--json", pickle})["processes"][0];
  ASSERT_FALSE(j["points"].empty()) << j.dump(2);
  const auto& peak = j["points"][0];
  EXPECT_EQ(peak["when"], "peak");
  EXPECT_GT(peak["allocated_bytes"].get<uint64_t>(), 0u) << peak.dump(2);
  EXPECT_EQ(peak["free_bytes"].get<uint64_t>() + peak["allocated_bytes"].get<uint64_t>(),
            peak["reserved_bytes"].get<uint64_t>())
      << peak.dump(2);
  EXPECT_TRUE(contains(j["expandable_segments"], "Would expandable_segments help? ")) << j.dump(2);

  // Over time too: a snapshot without history is one moment, whose free space is the peak's, not
  // that of a segment shown before its blocks (upto2.0-oom.pickle read 394 MiB against 4.34 MiB).
  nlohmann::json old =
      e2e::command_json({e2e::kMemtrace, "frag", "--json",
                         std::string(MEMTRACE_TEST_DATA) + "/torch/upto2.0-oom.pickle"})["processes"][0];
  uint64_t most = 0;
  for (const auto& point : old["free_in_heaps"][0]["points"])
    if (point[0].get<uint64_t>() <= old["last_alloc_ns"].get<uint64_t>()) most = std::max<uint64_t>(most, point[1]);
  EXPECT_EQ(most, old["points"][0]["free_bytes"].get<uint64_t>()) << old.dump(1);
}
