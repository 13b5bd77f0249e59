// Who holds the device, as a data-parallel job shows it: two ranks of samples/python/ddp_train.py
// (torchrun's way: a launcher and a worker process per rank) with the stand-in PyTorch, NCCL and
// cuBLAS on the simulated device. `peak --by owner` must name NCCL by the calls that made its
// memory, PyTorch's tensors (cuBLAS's workspace among them) and its cache and the CUDA context, each with the bytes the
// stand-ins' rules give, adding up to the device layer; the reserved owners to the reserved peak
// and to the simulated device's own ledger, to the byte. Each rank evaluates through a CUDA graph
// (its capture's private pool) and keeps a buffer in a MemPool: PyTorch's pools by pool.
#include <gtest/gtest.h>

#include "harness.h"

namespace {

const std::string kStandIn = MEMTRACE_SIM_DIR "/torch/site-packages";
const std::string kScript = e2e::python_sample_path("ddp_train.py");
constexpr uint64_t kMiB = 1 << 20;

const nlohmann::json* owner(const nlohmann::json& device, const std::string& name) {
  for (const nlohmann::json& o : device["owners"])
    if (o["owner"] == name) return &o;
  return nullptr;
}

TEST(Owners, TwoRanksOfATrainingJobAddUpToTheDevice) {
  const std::string dir = e2e::temp_dir("owners-ddp");
  e2e::Result r = e2e::run_traced(
      dir, {MEMTRACE_PYTHON, kScript, "--ranks", "2", "--steps", "3", "--eval-graph", "--pool-buffer", "6"}, {},
      {"PYTHONPATH=" + kStandIn});
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  const auto ledgers = e2e::read_ledgers(dir);
  nlohmann::json peak = e2e::command_json({e2e::kMemtrace, "peak", "--json", "--by", "owner", dir + "/traces"});
  // The launcher allocates nothing: the two workers, rank 0 and rank 1.
  std::set<int> ranks;
  for (const nlohmann::json& p : peak["processes"]) {
    if (p["devices"].empty()) continue;
    ASSERT_TRUE(p.contains("rank")) << p.dump(1);
    ranks.insert(p["rank"].get<int>());
    const nlohmann::json& d = p["devices"][0];
    SCOPED_TRACE("rank " + std::to_string(p["rank"].get<int>()));

    // NCCL, by the calls that made its memory (init.cc's communicator, 2 MiB granules over cuMem:
    // the device comm and per channel its peers and ring ranks; the rings on the first collective,
    // per channel a receive buffer of every protocol, 10 MiB, and the send side's, 2 MiB).
    const nlohmann::json* nccl = owner(d, "NCCL");
    ASSERT_TRUE(nccl) << d.dump(1);
    EXPECT_EQ((*nccl)["kind"], "library");
    EXPECT_EQ((*nccl)["bytes"], 34 * kMiB);
    const std::string at = " \u2190 worker at ddp_train.py:" + std::to_string(e2e::marked_line(kScript, "all_reduce"));
    std::map<std::string, uint64_t> parts;
    for (const nlohmann::json& part : (*nccl)["parts"]) parts[part["call"]] = part["bytes"];
    EXPECT_EQ(parts["ncclCommInitRank" + at], 10 * kMiB) << (*nccl).dump(1);
    EXPECT_EQ(parts["ncclAllReduce" + at], 24 * kMiB) << (*nccl).dump(1);

    // cuBLAS took no memory of its own: PyTorch gave its handle a workspace (32 MiB on sm 9.0) from
    // the caching allocator, among PyTorch's tensors.
    EXPECT_FALSE(owner(d, "cuBLAS")) << d.dump(1);

    // PyTorch's segments: its tensors (its cuBLAS workspace among them) and its cache.
    const nlohmann::json* tensors = owner(d, "PyTorch's tensors");
    const nlohmann::json* cache = owner(d, "PyTorch's cache");
    ASSERT_TRUE(tensors && cache) << d.dump(1);
    EXPECT_GT((*tensors)["bytes"].get<uint64_t>(), 32 * kMiB);

    // PyTorch's private pools, each with its tensors: the CUDA graph's capture pool (the capture's
    // activations, and the cuBLAS workspace of the capture's stream, made during the capture) and
    // the MemPool (a 6 MiB buffer in a 20 MiB segment: the large pool's segment below 10 MiB).
    const nlohmann::json* graph = owner(d, "PyTorch's CUDA graph pool 1");
    ASSERT_TRUE(graph) << d.dump(1);
    EXPECT_EQ((*graph)["kind"], "pytorch_pool");
    EXPECT_GE((*graph)["tensors_bytes"].get<uint64_t>(), 32 * kMiB) << graph->dump(1);
    EXPECT_GE((*graph)["bytes"].get<uint64_t>(), (*graph)["tensors_bytes"].get<uint64_t>());
    const nlohmann::json* pool = owner(d, "PyTorch's MemPool 1");
    ASSERT_TRUE(pool) << d.dump(1);
    EXPECT_EQ((*pool)["bytes"], 20 * kMiB);
    EXPECT_EQ((*pool)["tensors_bytes"], 6 * kMiB);

    // The context, as the simulated device makes it (300 MiB), from the device layer.
    const nlohmann::json* context = owner(d, "the CUDA context");
    ASSERT_TRUE(context) << d.dump(1);
    EXPECT_EQ((*context)["bytes"], 300 * kMiB);
    EXPECT_FALSE(owner(d, "the program")) << "the program's own code called no CUDA";
    EXPECT_FALSE(owner(d, "not placed")) << d.dump(1);

    // They add up: to the device at the peak (within 1%), the reserved ones to the reserved peak
    // and to the device's ledger, to the byte.
    ASSERT_TRUE(d["device_sampled"]);
    const double device = d["device_at_peak_bytes"].get<double>();
    EXPECT_NEAR(d["owners_total_bytes"].get<double>(), device, device / 100);
    uint64_t reserved = 0;
    for (const nlohmann::json& o : d["owners"])
      if (o["count"].get<uint64_t>() || o["kind"] == "pytorch_tensors" || o["kind"] == "pytorch_pool")
        reserved += o["bytes"].get<uint64_t>();
    EXPECT_EQ(reserved, d["peak_bytes"].get<uint64_t>()) << d.dump(1);
    // NVML's figure for the process (the simulated NVML's: the context and what is live), read
    // with the device layer's samples: more than the context, at most the device at the peak.
    ASSERT_TRUE(d["nvml_process_most_bytes"].is_number()) << d.dump(1);
    EXPECT_GT(d["nvml_process_most_bytes"].get<uint64_t>(), 300 * kMiB);
    EXPECT_LE(d["nvml_process_most_bytes"].get<double>(), device * 1.01);
    const auto ledger = ledgers.find(p["pid"].get<int>());
    ASSERT_NE(ledger, ledgers.end());
    EXPECT_EQ(ledger->second.peak.at(0), d["peak_bytes"].get<uint64_t>());
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1}));

  // timeline --by owner: each owner's reserved bytes over time; NCCL's most is what it held.
  nlohmann::json timeline = e2e::command_json({e2e::kMemtrace, "timeline", "--json", "--by", "owner", dir + "/traces"});
  size_t nccl_series = 0;
  for (const nlohmann::json& p : timeline["processes"])
    for (const nlohmann::json& series : p["series"]) {
      ASSERT_TRUE(series.contains("owner")) << series.dump();
      if (series["owner"] != "NCCL") continue;
      ++nccl_series;
      uint64_t most = 0;
      for (const nlohmann::json& point : series["points"]) most = std::max(most, point[1].get<uint64_t>());
      EXPECT_EQ(most, 34 * kMiB);
    }
  EXPECT_EQ(nccl_series, 2u) << "one a rank";

  // The text says who held the device, the parts beneath NCCL.
  e2e::Result text = e2e::run({e2e::kMemtrace, "peak", "--by", "owner", dir + "/traces"});
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("who held the device then:"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("    ncclAllReduce \u2190 worker at ddp_train.py:"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("in all: the device at the peak"), std::string::npos) << text.out;
}

// NCCL given twice the channels: diff --by owner says NCCL grew, by what its rules give (per rank
// two channels more: 2 x 4 MiB at init and 2 x 12 MiB for the rings).
TEST(Owners, DiffSaysWhichOwnerGrew) {
  const std::string dir = e2e::temp_dir("owners-diff");
  for (const char* channels : {"2", "4"}) {
    e2e::Result r = e2e::run({e2e::kMemtrace, "run", "--sim", "-o", dir + "/" + channels, "--", MEMTRACE_PYTHON,
                              kScript, "--ranks", "2", "--steps", "2"},
                             {"PYTHONPATH=" + kStandIn, std::string("NCCL_MAX_NCHANNELS=") + channels});
    ASSERT_EQ(r.status, 0) << r.err;
  }
  nlohmann::json diff = e2e::command_json({e2e::kMemtrace, "diff", "--json", "--by", "owner", dir + "/2", dir + "/4"});
  ASSERT_FALSE(diff["owners_at_peak"].empty()) << diff.dump(1);
  EXPECT_EQ(diff["owners_at_peak"][0]["owner"], "NCCL") << diff.dump(1);
  EXPECT_EQ(diff["owners_at_peak"][0]["change"], 2 * 32 * kMiB) << diff.dump(1);
  bool said = false;
  for (const auto& sentence : diff["summary"])
    said |= sentence.get<std::string>().rfind("Of who held the device at the peak, NCCL grew most: +64.0 MiB", 0) == 0;
  EXPECT_TRUE(said) << diff["summary"].dump(1);
}

// At each out-of-memory the report says who held the device, adding up to what the failed call
// reported in use.
TEST(Owners, EachOutOfMemorySaysWhoHeldTheDevice) {
  const std::string dir = e2e::temp_dir("owners-oom");
  e2e::Result r =
      e2e::run_traced(dir, {MEMTRACE_PYTHON, e2e::python_sample_path("torch_train.py"), "--steps", "2", "--oom"}, {},
                      {"PYTHONPATH=" + kStandIn});
  ASSERT_EQ(r.status, 0) << r.err;
  nlohmann::json report = e2e::report_json(dir + "/traces");
  const nlohmann::json& ooms = report["processes"][0]["oom_events"];
  ASSERT_FALSE(ooms.empty()) << report.dump(1);
  for (const nlohmann::json& o : ooms) {
    ASSERT_TRUE(o.contains("owners")) << o.dump(1);
    uint64_t sum = 0;
    for (const nlohmann::json& row : o["owners"]) sum += row["bytes"].get<uint64_t>();
    EXPECT_EQ(sum, o["device_total_bytes"].get<uint64_t>() - o["device_free_bytes"].get<uint64_t>()) << o.dump(1);
    bool tensors = false;
    for (const nlohmann::json& row : o["owners"]) tensors |= row["owner"] == "PyTorch's tensors";
    EXPECT_TRUE(tensors) << o.dump(1);
  }
}

// Expandable segments: PyTorch unmaps a pool's free pages out of an earlier mapping, leaving the
// rest of it mapped with a tensor in it. The pool keeps what stays (20 MiB: one 20 MiB page of the
// three mapped for 50 MiB, a 10 MiB tensor in it) and the default pool's tensors are all counted.
TEST(Owners, APoolsPagesUnmappedInPartLeaveTheRestItsOwn) {
  const std::string dir = e2e::temp_dir("owners-unmap");
  e2e::Result r = e2e::run_traced(dir,
                                  {MEMTRACE_PYTHON, "-c",
                                   "import torch\n"
                                   "M = 1 << 20\n"
                                   "pool = torch.cuda.MemPool()\n"
                                   "with torch.cuda.use_mem_pool(pool):\n"
                                   "    a = torch.empty(50 * M, dtype=torch.int8, device='cuda')\n"
                                   "del a\n"
                                   "with torch.cuda.use_mem_pool(pool):\n"
                                   "    b = torch.empty(10 * M, dtype=torch.int8, device='cuda')\n"
                                   "torch.cuda.empty_cache()\n"
                                   "c = torch.empty(200 * M, dtype=torch.int8, device='cuda')\n"},
                                  {}, {"PYTHONPATH=" + kStandIn, "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"});
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  nlohmann::json peak = e2e::command_json({e2e::kMemtrace, "peak", "--json", "--by", "owner", dir + "/traces"});
  const nlohmann::json& d = peak["processes"][0]["devices"][0];
  const nlohmann::json* pool = owner(d, "PyTorch's MemPool 1");
  ASSERT_TRUE(pool) << d.dump(1);
  EXPECT_EQ((*pool)["bytes"], 20 * kMiB) << d.dump(1);
  EXPECT_EQ((*pool)["tensors_bytes"], 10 * kMiB) << d.dump(1);
  EXPECT_EQ((*owner(d, "PyTorch's tensors"))["bytes"], 200 * kMiB) << d.dump(1);
}

// A snapshot of PyTorch's (the stand-in's _dump_snapshot) names each segment's pool
// (segment_pool_id): a CUDA graph's capture pool is a row of its own.
TEST(Owners, ASnapshotsPoolsAreRowsOfTheirOwn) {
  const std::string dir = e2e::temp_dir("owners-snapshot-pools");
  const std::string pickle = dir + "/snapshot.pickle";
  e2e::Result r = e2e::run_traced(dir,
                                  {MEMTRACE_PYTHON, "-c",
                                   "import sys, torch\n"
                                   "torch.cuda.memory._record_memory_history()\n"
                                   "x = torch.randn(1024, 1024, device='cuda')\n"
                                   "g = torch.cuda.CUDAGraph()\n"
                                   "with torch.cuda.graph(g):\n"
                                   "    y = torch.empty(3 << 20, dtype=torch.int8, device='cuda')\n"
                                   "torch.cuda.memory._dump_snapshot(sys.argv[1])\n",
                                   pickle},
                                  {}, {"PYTHONPATH=" + kStandIn});
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  nlohmann::json peak = e2e::command_json({e2e::kMemtrace, "peak", "--json", "--by", "owner", pickle});
  const nlohmann::json& d = peak["processes"][0]["devices"][0];
  const nlohmann::json* graph = owner(d, "PyTorch's CUDA graph pool 1");
  ASSERT_TRUE(graph) << d.dump(1);
  EXPECT_EQ((*graph)["bytes"], 20 * kMiB);
  EXPECT_EQ((*graph)["tensors_bytes"], 3 * kMiB);
  EXPECT_EQ((*owner(d, "PyTorch's tensors"))["bytes"], 4 * kMiB);

  // memtrace's own trace of the run, exported for PyTorch's viewer: the pool goes with it.
  const std::string exported = dir + "/exported.pickle";
  e2e::Result out = e2e::run({e2e::kMemtrace, "export", "--format", "memory-viz", "-o", exported, dir + "/traces"});
  ASSERT_EQ(out.status, 0) << out.err;
  nlohmann::json again = e2e::command_json({e2e::kMemtrace, "peak", "--json", "--by", "owner", exported});
  EXPECT_TRUE(owner(again["processes"][0]["devices"][0], "PyTorch's CUDA graph pool 1")) << again.dump(1);
}

// A PyTorch snapshot: every segment is PyTorch's, whatever stack it has or lacks; no device
// layer, so the owners add up to the reserved peak and say why.
TEST(Owners, APyTorchSnapshotIsPyTorchsTensorsAndCache) {
  nlohmann::json peak = e2e::command_json(
      {e2e::kMemtrace, "peak", "--json", "--by", "owner", MEMTRACE_TEST_DATA "/torch/2.1-finetune.pickle"});
  const nlohmann::json& d = peak["processes"][0]["devices"][0];
  ASSERT_EQ(d["owners"].size(), 2u) << d.dump(1);
  ASSERT_TRUE(owner(d, "PyTorch's tensors") && owner(d, "PyTorch's cache")) << d.dump(1);
  EXPECT_FALSE(d["device_sampled"]);
  EXPECT_EQ(d["owners_total_bytes"], d["peak_bytes"]);
  nlohmann::json allocated = e2e::command_json(
      {e2e::kMemtrace, "peak", "--json", "--layer", "allocated", MEMTRACE_TEST_DATA "/torch/2.1-finetune.pickle"});
  EXPECT_EQ((*owner(d, "PyTorch's tensors"))["bytes"], allocated["processes"][0]["devices"][0]["peak_bytes"]);
  e2e::Result text =
      e2e::run({e2e::kMemtrace, "peak", "--by", "owner", MEMTRACE_TEST_DATA "/torch/2.1-finetune.pickle"});
  EXPECT_NE(text.out.find("in all: the reserved peak (the device layer was not sampled"), std::string::npos)
      << text.out;
}

TEST(Owners, ByOwnerIsOfTheWholeDeviceNotOfALayer) {
  const std::string dir = e2e::temp_dir("owners-layer");
  e2e::Result r = e2e::run_sample(dir, "train_loop", {"--steps", "2"});
  ASSERT_EQ(r.status, 0) << r.err;
  e2e::Result refused = e2e::run({e2e::kMemtrace, "peak", "--by", "owner", "--layer", "allocated", dir + "/traces"});
  EXPECT_EQ(refused.status, 2);
  EXPECT_NE(refused.err.find("--by owner shows who held the whole device"), std::string::npos) << refused.err;
  // A C++ program's own code calling CUDA: the program.
  nlohmann::json peak = e2e::command_json({e2e::kMemtrace, "peak", "--json", "--by", "owner", dir + "/traces"});
  const nlohmann::json& d = peak["processes"][0]["devices"][0];
  ASSERT_TRUE(owner(d, "the program")) << d.dump(1);
  EXPECT_EQ((*owner(d, "the program"))["bytes"], d["peak_bytes"]);
}

}  // namespace
