// Writes a synthetic trace as memtrace run would: a training job's allocations and frees with a
// bounded live set, a few hundred call stacks, a step mark every --step-events events, and one
// site that leaks a fixed amount per step. For measuring the analyses on traces of any length.
//   trace_generator OUT.memtrace [--events N] [--live N] [--step-events N] [--stacks N]
//                   [--pattern training|random]
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "memtrace/format/trace_writer.h"

namespace {

uint64_t option(int argc, char** argv, const std::string& name, uint64_t fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (name == argv[i]) return std::strtoull(argv[i + 1], nullptr, 10);
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace memtrace;
  if (argc < 2 || argv[1][0] == '-') {
    std::fprintf(stderr,
                 "usage: trace_generator OUT.memtrace [--events N] [--live N] [--step-events N] [--stacks N] "
                 "[--pattern training|random]\n");
    return 2;
  }
  const uint64_t events = option(argc, argv, "--events", 100'000'000);
  const uint64_t live_target = option(argc, argv, "--live", 10'000);
  const uint64_t step_events = option(argc, argv, "--step-events", 1'000'000);
  const uint64_t stack_count = option(argc, argv, "--stacks", 500);
  std::string pattern = "training";
  for (int i = 2; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--pattern") pattern = argv[i + 1];
  if (pattern != "training" && pattern != "random") {
    std::fprintf(stderr, "trace_generator: --pattern is training or random\n");
    return 2;
  }
  std::string error;
  auto writer = TraceWriter::create(argv[1], error);
  if (!writer) {
    std::fprintf(stderr, "trace_generator: %s\n", error.c_str());
    return 1;
  }
  pb::TraceHeader header;
  header.set_pid(1000);
  header.add_command("trace_generator");
  writer->write_header(header);
  pb::Device device;
  device.set_ordinal(0);
  device.set_name("synthetic GPU");
  device.set_total_bytes(80ull << 30);
  writer->add_device(device);

  // Stacks of 19 Python frames: 18 shared, under one of the site's own.
  std::vector<uint64_t> stacks;
  std::vector<uint64_t> common;
  for (int depth = 0; depth < 18; ++depth) {
    FrameInfo f;
    f.address = 0x400000 + depth * 64;
    f.module = "/usr/bin/python3";
    std::string name = "layer_" + std::to_string(depth);
    f.function = name;
    f.file = "model.py";
    f.line = 10 + depth;
    f.python = true;
    common.push_back(writer->intern_frame(f));
  }
  for (uint64_t s = 0; s <= stack_count; ++s) {
    FrameInfo f;
    f.address = 0x500000 + s * 64;
    f.module = "/usr/bin/python3";
    std::string name = s == stack_count ? "accumulate_loss" : "forward_" + std::to_string(s);
    f.function = name;
    f.file = "train.py";
    f.line = 100;
    f.python = true;
    std::vector<uint64_t> frames{writer->intern_frame(f)};
    frames.insert(frames.end(), common.begin(), common.end());
    stacks.push_back(writer->intern_stack(frames));
  }
  const uint64_t leak_stack = stacks.back();
  const uint64_t step_name = writer->intern_string("memtrace.step");

  // random: frees pick any live allocation (the worst case for the live set's locality);
  // training: the first half of --live stays (weights), the rest is activations made by a forward
  // pass and freed in reverse by the backward pass, as a training loop does.
  const bool training = pattern == "training";
  bool backward = false;
  std::mt19937_64 rng(42);
  std::vector<std::pair<uint64_t, Api>> live;  // address, the API that made it
  uint64_t next_addr = 0x7f0000000000, t = 0, leaked = 0;
  for (uint64_t i = 0; i < events; ++i) {
    Event e;
    t += 50 + rng() % 100;
    e.t_ns = t;
    e.tid = 1 + static_cast<uint32_t>(rng() % 4);
    if (i % step_events == step_events - 1) {
      e.api = Api::kNvtxMark;
      e.layer = Layer::kUnknown;
      e.name = step_name;
    } else if (i % step_events == step_events - 2) {
      e.api = Api::kCudaMalloc;
      e.kind = MemKind::kDevice;
      e.device = 0;
      e.addr = next_addr;
      next_addr += 1 << 20;
      e.size = 4096;
      e.stack_id = leak_stack;
      ++leaked;
    } else if (training && !live.empty() && live.size() > live_target / 2 && (backward || live.size() >= live_target)) {
      // Backward: activations go in the reverse order of the forward pass that made them.
      backward = live.size() > live_target / 2 + 1;
      e.addr = live.back().first;
      e.api = live.back().second == Api::kCudaMallocAsync ? Api::kCudaFreeAsync : Api::kCudaFree;
      e.kind = MemKind::kDevice;
      live.pop_back();
    } else if (live.size() < live_target && (training || live.size() < live_target / 2 || rng() % 2 == 0)) {
      const bool async = rng() % 8 == 0;
      e.api = async ? Api::kCudaMallocAsync : Api::kCudaMalloc;
      e.kind = MemKind::kDevice;
      e.device = 0;
      e.addr = next_addr;
      e.size = uint64_t(512) << (rng() % 18);
      next_addr += (e.size + 511) / 512 * 512;
      e.stack_id = stacks[rng() % stack_count];
      e.stream = async ? 0x1000 : 0;
      live.emplace_back(e.addr, e.api);
    } else {
      size_t k = rng() % live.size();
      e.addr = live[k].first;
      e.api = live[k].second == Api::kCudaMallocAsync ? Api::kCudaFreeAsync : Api::kCudaFree;
      e.kind = MemKind::kDevice;
      live[k] = live.back();
      live.pop_back();
    }
    writer->add(e);
  }
  pb::Footer footer;
  footer.set_end_ns(t);
  footer.set_exit_status(0);
  footer.set_end_reason("exited");
  writer->finish(footer);
  if (writer->failed()) {
    std::fprintf(stderr, "trace_generator: %s\n", writer->error().c_str());
    return 1;
  }
  std::printf("%llu events, %zu live at the end (%llu leaked by the step site)\n",
              static_cast<unsigned long long>(events), live.size() + leaked, static_cast<unsigned long long>(leaked));
  return 0;
}
