// The analysis commands on traces of samples with known answers: peak, leaks and growth per
// step, fragmentation, timeline, exports, check's exit codes and JUnit, diff, several processes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "harness.h"
#include "perfetto_trace.pb.h"

namespace {

constexpr uint64_t kMiB = 1 << 20;

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The steps sample: 10 steps leaking 1 MiB each, a pool described through NVTX, fragmented at
// the end on a 64 MiB device (no context overhead) so that its new segment fails.
class StepsRun : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(e2e::temp_dir("steps"));
    e2e::Result r = e2e::run_traced(
        *dir_, {"/usr/bin/env", "MEMTRACE_SIM_CONTEXT_BYTES=0", e2e::sample_path("steps"), "--fragment"},
        {"--sim-capacity", "64MiB"});
    ASSERT_EQ(r.status, 0) << r.err;
    auto accounts = e2e::sample_accounts(r.out);
    ASSERT_EQ(accounts.size(), 1u);
    account_ = new nlohmann::json(accounts.begin()->second);
  }
  static std::string traces() { return *dir_ + "/traces"; }
  static std::string* dir_;
  static nlohmann::json* account_;
};
std::string* StepsRun::dir_ = nullptr;
nlohmann::json* StepsRun::account_ = nullptr;

TEST_F(StepsRun, NvtxMarksAndRangesAreRecorded) {
  nlohmann::json report = e2e::report_json(traces());
  const auto events = report["processes"][0]["events"];
  EXPECT_EQ(events["nvtxMark"]["calls"], 10u);
  EXPECT_EQ(events["nvtxRangePush"]["calls"], 10u);
  EXPECT_EQ(events["nvtxRangePop"]["calls"], 10u);
  EXPECT_EQ(events["nvtxMemHeapRegister"]["calls"], 1u);
  EXPECT_EQ(events["nvtxMemRegionsRegister"]["calls"], 30u + 16u);
}

TEST_F(StepsRun, PeakIsTheLedgersWithItsStepPhaseAndSites) {
  nlohmann::json peak = e2e::command_json({e2e::kMemtrace, "peak", "--json", traces()});
  const auto& d = peak["processes"][0]["devices"][0];
  const uint64_t ledger_peak = e2e::read_ledgers(*dir_).begin()->second.peak.at(0);
  EXPECT_EQ(d["peak_bytes"], ledger_peak);
  EXPECT_EQ(d["peak_bytes"], (*account_)["peak_bytes"]["0"]);
  EXPECT_EQ(d["peak_bytes"], 58 * kMiB);
  EXPECT_EQ(d["peak_step"], 9u);  // the last step's leak made it, inside its range
  EXPECT_EQ(d["peak_phase"], "train_step");
  ASSERT_EQ(d["sites"].size(), 3u);
  EXPECT_NE(d["sites"][0]["location"].get<std::string>().find("grow"), std::string::npos);  // inlined or not
  EXPECT_NE(d["sites"][2]["location"].get<std::string>().find("record_loss"), std::string::npos);
  EXPECT_EQ(d["sites"][2]["count"], 10u);

  nlohmann::json allocated = e2e::command_json({e2e::kMemtrace, "peak", "--json", "--layer", "allocated", traces()});
  const auto& a = allocated["processes"][0]["devices"][0];
  EXPECT_EQ(a["peak_bytes"], 32 * kMiB);  // the pool full of 2 MiB blocks
  bool from_fragment = false;             // the pool's own frames may be inlined into it, or not
  for (const auto& f : a["sites"][0]["stack"])
    from_fragment |= f["function"].get<std::string>().find("fragment") != std::string::npos;
  EXPECT_TRUE(from_fragment) << a["sites"][0].dump(2);

  e2e::Result text = e2e::run({e2e::kMemtrace, "peak", traces(), "--by", "api"});
  EXPECT_NE(text.out.find("every cudaMalloc call"), std::string::npos) << text.out;
}

TEST_F(StepsRun, LeaksSeparateGrowthFromMemoryKept) {
  nlohmann::json leaks = e2e::command_json({e2e::kMemtrace, "leaks", "--json", traces()});
  const auto& p = leaks["processes"][0];
  EXPECT_EQ(p["steps"], 10u);
  ASSERT_EQ(p["growth"].size(), 1u) << p["growth"].dump(2);
  EXPECT_EQ(p["growth"][0]["bytes_per_step"], kMiB);
  EXPECT_EQ(p["growth"][0]["first_step"], 0u);
  EXPECT_NE(p["growth"][0]["location"].get<std::string>().find("record_loss"), std::string::npos);
  EXPECT_EQ(leaks["live_at_exit_bytes"], (*account_)["live_at_exit_bytes"]["0"]);
  std::map<std::string, std::string> kinds;
  for (const auto& s : p["devices"][0]["sites"]) kinds[s["location"]] = s["kind"];
  for (const auto& [location, kind] : kinds)
    EXPECT_EQ(kind, location.find("record_loss") != std::string::npos ? "growing" : "kept") << location;
  // A step pattern that matches nothing: no growth, and the text says how to name steps.
  e2e::Result none = e2e::run({e2e::kMemtrace, "leaks", traces(), "--step", "no-such-step"});
  EXPECT_EQ(none.status, 0);
  EXPECT_NE(none.out.find("--step REGEX"), std::string::npos) << none.out;
  e2e::Result bad = e2e::run({e2e::kMemtrace, "leaks", traces(), "--step", "(unclosed"});
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.err.find("not a regular expression"), std::string::npos) << bad.err;
}

TEST_F(StepsRun, FragmentationAtTheOutOfMemory) {
  nlohmann::json frag = e2e::command_json({e2e::kMemtrace, "frag", "--json", traces()});
  const auto& p = frag["processes"][0];
  ASSERT_TRUE(p["layers_known"].get<bool>());
  nlohmann::json oom;
  for (const auto& point : p["points"])
    if (point["when"] == "oom") oom = point;
  ASSERT_FALSE(oom.is_null()) << p.dump(2);
  EXPECT_EQ(oom["free_bytes"], 16 * kMiB);
  EXPECT_EQ(oom["largest_free_bytes"], 2 * kMiB);
  EXPECT_DOUBLE_EQ(oom["fragmentation_index"].get<double>(), 0.875);
  EXPECT_EQ(oom["request_bytes"], 32 * kMiB);
  EXPECT_NE(oom["advice"].get<std::string>().find("expandable_segments"), std::string::npos);
  // Free memory is counted only inside what the pool described as its heaps (one 32 MiB segment at
  // its emptiest), never the sample's plain cudaMalloc buffers outside them (26 MiB more reserved).
  ASSERT_EQ(p["free_in_heaps"].size(), 1u) << p.dump(2);
  uint64_t most_free = 0;
  for (const auto& point : p["free_in_heaps"][0]["points"]) most_free = std::max(most_free, point[1].get<uint64_t>());
  EXPECT_EQ(most_free, 32 * kMiB);
  e2e::Result text = e2e::run({e2e::kMemtrace, "frag", traces()});
  EXPECT_NE(text.out.find("free inside the allocator's heaps peaked at 32.0 MiB"), std::string::npos) << text.out;
  EXPECT_EQ(text.out.find("reserved but not allocated"), std::string::npos) << text.out;
}

TEST_F(StepsRun, TimelineChartCsvAndSvg) {
  const std::string csv = *dir_ + "/timeline.csv", svg = *dir_ + "/timeline.svg";
  e2e::Result r = e2e::run({e2e::kMemtrace, "timeline", traces(), "--csv", csv, "--svg", svg, "--width", "40"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("device 0 reserved, "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(": at most 58.0 MiB"), std::string::npos) << r.out;  // a peak is a moment, not the window
  uint64_t most = 0;
  std::istringstream lines(read_file(csv));
  std::string line;
  std::getline(lines, line);
  EXPECT_EQ(line, "pid,device,layer,t_ns,max_bytes,last_bytes");
  while (std::getline(lines, line))
    if (line.find(",reserved,") != std::string::npos) {  // max_bytes: the next to last column
      size_t last = line.rfind(','), before = line.rfind(',', last - 1);
      most = std::max<uint64_t>(most, std::stoull(line.substr(before + 1, last - before - 1)));
    }
  EXPECT_EQ(most, 58 * kMiB);
  std::string picture = read_file(svg);
  EXPECT_EQ(picture.rfind("<svg", 0), 0u);
  EXPECT_NE(picture.find("<title>train_step</title>"), std::string::npos);  // phases shaded
  // A rerun replaces the report file; a trace is never written over.
  std::filesystem::resize_file(csv, 0);
  e2e::Result again = e2e::run({e2e::kMemtrace, "timeline", traces(), "--csv", csv});
  EXPECT_EQ(again.status, 0) << again.err;
  EXPECT_EQ(read_file(csv).rfind("pid,device,layer", 0), 0u);
  const std::string trace = std::filesystem::directory_iterator(traces())->path().string();
  const auto trace_size = std::filesystem::file_size(trace);
  e2e::Result over_trace = e2e::run({e2e::kMemtrace, "timeline", traces(), "--csv", trace});
  EXPECT_NE(over_trace.status, 0);
  EXPECT_NE(over_trace.err.find("is a memtrace trace: it is not written over"), std::string::npos) << over_trace.err;
  EXPECT_EQ(std::filesystem::file_size(trace), trace_size);
}

// -o naming what is not a file is written in place: /dev/stdout (a pipe, as inside $(...): the
// command once opened it to see whether it was a trace, read its own pipe and waited for ever; or
// a file: as root, a temporary file was put in /dev and renamed over the /dev/stdout link),
// /dev/null; a folder is refused. Nothing is put beside them.
TEST_F(StepsRun, OutputThatIsNoFileIsWrittenInPlace) {
  const bool linked = std::filesystem::is_symlink("/dev/stdout");  // as /dev has it (udev, Docker)
  e2e::Result plain = e2e::run({e2e::kMemtrace, "export", "--format", "jsonl", traces()});
  ASSERT_EQ(plain.status, 0) << plain.err;
  ASSERT_GT(plain.out.size(), 1000u);
  e2e::Result to_file = e2e::run(
      {"/usr/bin/timeout", "120", e2e::kMemtrace, "export", "--format", "jsonl", "-o", "/dev/stdout", traces()});
  EXPECT_EQ(to_file.status, 0) << to_file.err;
  EXPECT_EQ(to_file.out, plain.out);
  EXPECT_EQ(std::filesystem::is_symlink("/dev/stdout"), linked);
  const std::string piped_out = *dir_ + "/piped.jsonl";
  e2e::Result piped = e2e::run({"/bin/sh", "-c",
                                "/usr/bin/timeout 120 \"$0\" export --format jsonl -o /dev/stdout \"$1\" | cat >\"$2\"",
                                e2e::kMemtrace, traces(), piped_out});
  EXPECT_EQ(piped.status, 0) << piped.err;
  EXPECT_EQ(read_file(piped_out), plain.out);
  e2e::Result csv = e2e::run({"/usr/bin/timeout", "120", e2e::kMemtrace, "timeline", traces(), "--csv", "/dev/stdout"});
  EXPECT_EQ(csv.status, 0) << csv.err;
  EXPECT_NE(csv.out.find("pid,device,layer,t_ns,max_bytes,last_bytes"), std::string::npos) << csv.out;
  e2e::Result null = e2e::run({e2e::kMemtrace, "export", "--format", "chrome", "-o", "/dev/null", traces()});
  EXPECT_EQ(null.status, 0) << null.err;
  EXPECT_TRUE(null.out.empty());
  e2e::Result folder = e2e::run({e2e::kMemtrace, "export", "--format", "jsonl", "-o", *dir_, traces()});
  EXPECT_NE(folder.status, 0);
  EXPECT_NE(folder.err.find("is a folder"), std::string::npos) << folder.err;
  EXPECT_EQ(std::filesystem::is_symlink("/dev/stdout"), linked);
  for (const auto& entry : std::filesystem::directory_iterator("/dev"))
    EXPECT_EQ(entry.path().filename().string().find("memtrace-tmp"), std::string::npos) << entry.path();
}

TEST_F(StepsRun, FoldedStacksAddUpToThePeakAndChromeTraceHasCountersAndRanges) {
  e2e::Result folded = e2e::run({e2e::kMemtrace, "export", "--format", "folded", "--at", "peak", traces()});
  ASSERT_EQ(folded.status, 0) << folded.err;
  uint64_t total = 0;
  std::istringstream lines(folded.out);
  std::string line;
  while (std::getline(lines, line)) {
    EXPECT_EQ(line.rfind("pid ", 0), 0u) << line;
    total += std::stoull(line.substr(line.rfind(' ') + 1));
  }
  EXPECT_EQ(total, 58 * kMiB);
  EXPECT_NE(folded.out.find(";main;"), std::string::npos);

  e2e::Result chrome = e2e::run({e2e::kMemtrace, "export", "--format", "chrome", traces()});
  ASSERT_EQ(chrome.status, 0) << chrome.err;
  nlohmann::json trace = nlohmann::json::parse(chrome.out);
  uint64_t counter_max = 0, slices = 0, begins = 0, ends = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "C" && e["name"] == "device 0 reserved")
      counter_max = std::max(counter_max, e["args"]["bytes"].get<uint64_t>());
    if (e["ph"] == "B" && e["name"] == "train_step") ++slices;
    if (e["ph"] == "b" && e["cat"] == "reserved") ++begins;
    if (e["ph"] == "e" && e["cat"] == "reserved") ++ends;
  }
  EXPECT_EQ(counter_max, 58 * kMiB);
  EXPECT_EQ(slices, 10u);
  EXPECT_EQ(begins, 12u);  // 12 cudaMalloc that worked, none freed
  EXPECT_EQ(ends, 0u);
}

// The Perfetto export, read back with Perfetto's field numbers (analysis/perfetto_trace.proto):
// every track described before use, the reserved counter peaking at the peak, every allocation a
// slice on a lane that never holds two at once, what stays open adding up to the counters' end.
TEST_F(StepsRun, PerfettoTraceHasCountersSlicesOnLanesAndRanges) {
  const std::string file = *dir_ + "/steps.pftrace";
  e2e::Result r = e2e::run({e2e::kMemtrace, "export", "--format", "perfetto", "-o", file, traces()});
  ASSERT_EQ(r.status, 0) << r.err;
  memtrace::perfetto::Trace trace;
  ASSERT_TRUE(trace.ParseFromString(read_file(file)));
  nlohmann::json peak = e2e::command_json({e2e::kMemtrace, "peak", "--json", traces()});
  const uint64_t peak_bytes = peak["processes"][0]["devices"][0]["peak_bytes"];

  // What each sequence interned: names, annotation keys, annotation texts, each by iid.
  struct Interned {
    std::map<uint64_t, std::string> names, keys, texts;
  };
  std::map<uint32_t, Interned> interned;
  std::map<uint64_t, memtrace::perfetto::TrackDescriptor> tracks;
  std::map<std::string, int64_t> counter_max, counter_last;
  std::map<uint64_t, std::pair<std::string, uint64_t>> open;  // lane: (category, bytes)
  std::map<std::string, int> begins, ends;
  int train_steps = 0, with_stack = 0;
  for (const auto& p : trace.packet()) {
    const uint32_t sequence = p.trusted_packet_sequence_id();
    ASSERT_NE(sequence, 0u);
    if (!interned.count(sequence)) {  // a sequence starts with its state cleared
      EXPECT_EQ(p.sequence_flags(), memtrace::perfetto::TracePacket::SEQ_INCREMENTAL_STATE_CLEARED);
    }
    Interned& known = interned[sequence];
    for (const auto& n : p.interned_data().event_names()) EXPECT_TRUE(known.names.emplace(n.iid(), n.name()).second);
    for (const auto& n : p.interned_data().debug_annotation_names())
      EXPECT_TRUE(known.keys.emplace(n.iid(), n.name()).second);
    for (const auto& n : p.interned_data().debug_annotation_string_values())
      EXPECT_TRUE(known.texts.emplace(n.iid(), n.str()).second);
    if (p.has_track_descriptor()) {
      EXPECT_TRUE(tracks.emplace(p.track_descriptor().uuid(), p.track_descriptor()).second) << "uuid used twice";
      continue;
    }
    ASSERT_TRUE(p.has_track_event());
    const auto& t = p.track_event();
    ASSERT_TRUE(tracks.count(t.track_uuid())) << "an event on a track not described before it";
    const auto& track = tracks[t.track_uuid()];
    const std::string name = t.has_name_iid() ? known.names.at(t.name_iid()) : t.name();
    std::map<std::string, const memtrace::perfetto::DebugAnnotation*> args;
    for (const auto& a : t.debug_annotations()) args[known.keys.at(a.name_iid())] = &a;
    if (t.type() == memtrace::perfetto::TrackEvent::TYPE_COUNTER) {
      EXPECT_TRUE(track.has_counter());
      counter_max[track.name()] = std::max(counter_max[track.name()], t.counter_value());
      counter_last[track.name()] = t.counter_value();
    } else if (t.type() == memtrace::perfetto::TrackEvent::TYPE_SLICE_BEGIN && !track.has_thread()) {
      ASSERT_EQ(t.categories_size(), 1);
      ASSERT_TRUE(args.count("bytes") && args.count("stack") && args.count("address") && args.count("api")) << name;
      if (known.texts.at(args["stack"]->string_value_iid()).find("main") != std::string::npos) ++with_stack;
      EXPECT_TRUE(open.emplace(t.track_uuid(), std::make_pair(t.categories(0), args["bytes"]->uint_value())).second)
          << "two slices at once on lane " << track.name();
      ++begins[t.categories(0)];
    } else if (t.type() == memtrace::perfetto::TrackEvent::TYPE_SLICE_END && !track.has_thread()) {
      auto it = open.find(t.track_uuid());
      ASSERT_NE(it, open.end()) << "an end with no begin on " << track.name();
      ++ends[it->second.first];
      open.erase(it);
    } else if (t.type() == memtrace::perfetto::TrackEvent::TYPE_SLICE_BEGIN && name == "train_step") {
      EXPECT_NE(track.thread().tid(), 0);
      ++train_steps;
    }
  }
  EXPECT_EQ(counter_max["device 0 reserved"], static_cast<int64_t>(peak_bytes));
  EXPECT_EQ(peak_bytes, 58 * kMiB);
  EXPECT_EQ(begins["reserved"], 12);  // 12 cudaMalloc that worked, none freed
  EXPECT_EQ(ends["reserved"], 0);
  EXPECT_GT(begins["allocated"], ends["allocated"]);
  EXPECT_EQ(with_stack, begins["reserved"] + begins["allocated"]);
  EXPECT_EQ(train_steps, 10);
  std::map<std::string, int64_t> live;
  for (const auto& [lane, slice] : open) live[slice.first] += static_cast<int64_t>(slice.second);
  EXPECT_EQ(live["reserved"], counter_last["device 0 reserved"]);
  EXPECT_EQ(live["allocated"], counter_last["device 0 allocated"]);
  EXPECT_GT(counter_max["device 0 allocated"], 0);

  // The same trace as Chrome JSON (which has no stacks) is larger.
  e2e::Result chrome = e2e::run({e2e::kMemtrace, "export", "--format", "chrome", traces()});
  ASSERT_EQ(chrome.status, 0);
  EXPECT_LT(std::filesystem::file_size(file), chrome.out.size());
}

// The page itself is checked in a browser (tests/browser); here, that it is one file that fetches
// nothing, with the data it draws, and that bad use is told.
TEST_F(StepsRun, HtmlPageIsSelfContained) {
  const std::string page = *dir_ + "/report.html";
  e2e::Result r = e2e::run({e2e::kMemtrace, "html", traces(), "-o", page});
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string html = read_file(page);
  EXPECT_EQ(html.find("src=\"http"), std::string::npos);
  EXPECT_EQ(html.find("href=\"http"), std::string::npos);
  EXPECT_EQ(html.find("@DATA@"), std::string::npos);
  EXPECT_NE(html.find("uPlot"), std::string::npos);
  EXPECT_NE(html.find("Permission is hereby granted"), std::string::npos);  // uPlot's licence, kept
  const size_t start = html.find("<script id=\"memtrace-data\" type=\"application/json\">");
  ASSERT_NE(start, std::string::npos);
  const size_t from = html.find('>', start) + 1;
  nlohmann::json data = nlohmann::json::parse(html.substr(from, html.find("</script>", from) - from));
  ASSERT_EQ(data["processes"].size(), 1u);
  const auto& p = data["processes"][0];
  EXPECT_EQ(p["devices"][0]["peak_bytes"], 58 * kMiB);
  EXPECT_EQ(p["steps"].size(), 10u);
  EXPECT_EQ(p["ooms"].size(), 1u);
  uint64_t reserved_spans = 0;
  for (const auto& a : p["largest"]) reserved_spans += a[4] == 0;
  EXPECT_EQ(reserved_spans, 12u);  // every cudaMalloc that worked, one by one

  e2e::Result missing = e2e::run({e2e::kMemtrace, "html", *dir_ + "/nothing-here", "-o", *dir_ + "/x.html"});
  EXPECT_EQ(missing.status, 2);
  EXPECT_NE(missing.err.find("memtrace html:"), std::string::npos) << missing.err;
  EXPECT_FALSE(std::filesystem::exists(*dir_ + "/x.html"));
}

TEST_F(StepsRun, CheckExitCodesAndJUnit) {
  EXPECT_EQ(e2e::run({e2e::kMemtrace, "check", traces(), "--max-peak", "58MiB", "--max-leaked", "60MiB"}).status, 0);
  const std::string junit = *dir_ + "/check.xml";
  e2e::Result broken = e2e::run(
      {e2e::kMemtrace, "check", traces(), "--max-peak", "57MiB", "--max-growth-per-step", "512KiB", "--junit", junit});
  EXPECT_EQ(broken.status, 1);
  EXPECT_NE(broken.out.find("FAILED  max-peak: 58.0 MiB exceeds 57.0 MiB"), std::string::npos) << broken.out;
  EXPECT_NE(broken.out.find("FAILED  max-growth-per-step: 1.00 MiB exceeds 512 KiB"), std::string::npos) << broken.out;
  EXPECT_NE(broken.out.find("record_loss"), std::string::npos);  // the sites behind it
  std::string xml = read_file(junit);
  EXPECT_NE(xml.find("tests=\"2\" failures=\"2\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("<testcase classname=\"memtrace\" name=\"max-peak\">"), std::string::npos) << xml;
  // Bad use and unreadable traces: 2.
  EXPECT_EQ(e2e::run({e2e::kMemtrace, "check", traces(), "--max-peak", "lots"}).status, 2);
  EXPECT_EQ(e2e::run({e2e::kMemtrace, "check", traces()}).status, 2);
  EXPECT_EQ(e2e::run({e2e::kMemtrace, "check", *dir_ + "/nothing-here", "--max-peak", "1GiB"}).status, 2);
  EXPECT_EQ(e2e::run({e2e::kMemtrace, "check", traces(), "--baseline", traces()}).status, 2);
  // Against itself: no regression; decimal units accepted.
  EXPECT_EQ(e2e::run({e2e::kMemtrace, "check", traces(), "--baseline", traces(), "--max-regression", "0", "--max-peak",
                      "61MB"})
                .status,
            0);
}

TEST(Diff, TwoRunsThatDifferByAKnownSite) {
  const std::string base = e2e::temp_dir("diff-base"), next = e2e::temp_dir("diff-new");
  ASSERT_EQ(e2e::run_sample(base, "leak", {"--iterations", "10"}).status, 0);
  ASSERT_EQ(e2e::run_sample(next, "leak", {"--iterations", "30"}).status, 0);
  // By stack: the sample allocates everything through one helper, the stacks tell the callers apart.
  nlohmann::json d =
      e2e::command_json({e2e::kMemtrace, "diff", "--json", "--by", "stack", base + "/traces", next + "/traces"});
  EXPECT_EQ(d["live_at_exit"]["change"], 20 * 64 * 1024);
  ASSERT_EQ(d["sites_at_peak"].size(), 1u) << d.dump(2);  // the batch buffer is the same in both
  EXPECT_EQ(d["sites_at_peak"][0]["change"], 20 * 64 * 1024);
  // accumulate_stats calls the helper as its last act: a tail call, so its caller's line shows it.
  const auto& caller = d["sites_at_peak"][0]["stack"][1];
  EXPECT_EQ(caller["function"], "process_batch");
  std::istringstream source(read_file(std::string(MEMTRACE_SAMPLES_SOURCE) + "/leak.cpp"));
  std::string line;
  uint32_t number = 0, call = 0;
  while (std::getline(source, line) && !call)
    if (++number && line == "  accumulate_stats();") call = number;
  EXPECT_EQ(caller["line"], call);
  e2e::Result text = e2e::run({e2e::kMemtrace, "diff", base + "/traces", next + "/traces"});
  EXPECT_NE(text.out.find("+1.25 MiB"), std::string::npos) << text.out;
}

TEST(SeveralProcesses, PeakHasPerProcessRowsTheSumAndTheImbalance) {
  const std::string dir = e2e::temp_dir("ranks");
  ASSERT_EQ(e2e::run_sample(dir, "processes").status, 0);
  nlohmann::json peak = e2e::command_json({e2e::kMemtrace, "peak", "--json", dir + "/traces"});
  uint64_t sum = 0, most = 0;
  size_t with_peak = 0;
  for (const auto& p : peak["processes"]) {
    uint64_t process = 0;
    for (const auto& d : p["devices"]) process += d["peak_bytes"].get<uint64_t>();
    with_peak += p["devices"].empty() ? 0 : 1;
    sum += process;
    most = std::max(most, process);
  }
  ASSERT_GE(peak["processes"].size(), 3u);
  EXPECT_EQ(peak["all_processes"]["sum_of_peaks_bytes"], sum);
  EXPECT_EQ(peak["all_processes"]["largest_peak_bytes"], most);
  EXPECT_DOUBLE_EQ(peak["all_processes"]["imbalance"].get<double>(),
                   static_cast<double>(most) / (static_cast<double>(sum) / static_cast<double>(with_peak)));
}

// A job of two ranks, each node writing its own output folder under the job's: every command
// reads the job's folder, names the processes by rank and host, and peak shows the imbalance.
// Only RANK, LOCAL_RANK and WORLD_SIZE are read from a process's environment.
TEST(Ranks, AJobFolderIsEveryRanksTraces) {
  const std::string job = e2e::temp_dir("job");
  for (int rank : {1, 0}) {
    std::vector<std::string> argv{e2e::kMemtrace,
                                  "run",
                                  "--sim",
                                  "--compress",
                                  "0",
                                  "-o",
                                  job + "/node" + std::to_string(rank),
                                  "--",
                                  e2e::sample_path("train_loop"),
                                  "--steps",
                                  std::to_string(2 + 3 * rank)};
    e2e::Result r = e2e::run(
        argv, {"RANK=" + std::to_string(rank), "LOCAL_RANK=0", "WORLD_SIZE=2", "MEMTRACE_TEST_SECRET=do-not-keep-me"});
    ASSERT_EQ(r.status, 0) << r.err;
  }
  nlohmann::json peak = e2e::command_json({e2e::kMemtrace, "peak", "--json", job});
  ASSERT_EQ(peak["processes"].size(), 2u);
  for (int rank : {0, 1}) {
    const auto& p = peak["processes"][rank];
    EXPECT_EQ(p["rank"], rank);
    EXPECT_EQ(p["local_rank"], 0);
    EXPECT_EQ(p["world_size"], 2);
    EXPECT_FALSE(p["host"].get<std::string>().empty());
  }
  EXPECT_TRUE(peak.contains("all_processes"));
  e2e::Result text = e2e::run({e2e::kMemtrace, "peak", job});
  EXPECT_NE(text.out.find("rank 0 of 2 (process "), std::string::npos) << text.out;
  EXPECT_LT(text.out.find("rank 0 of 2"), text.out.find("rank 1 of 2")) << text.out;
  EXPECT_NE(text.out.find("imbalance"), std::string::npos) << text.out;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(job)) {
    if (!entry.is_regular_file()) continue;
    std::string bytes = read_file(entry.path().string());
    EXPECT_EQ(bytes.find("do-not-keep-me"), std::string::npos) << entry.path();
  }
}

// A job of four nodes: each summarizes its own folder where its traces are (memtrace summarize,
// as the job's launcher runs it on every node) and sends only the summaries; the job's folder of
// summaries gives the peak, leaks, report and check its traces give, and what needs the events
// says so.
TEST(Ranks, ANodesSummariesAreReadAsItsTraces) {
  const std::string traces = e2e::temp_dir("job_traces"), summaries = e2e::temp_dir("job_summaries");
  for (int node = 0; node < 4; ++node) {
    const std::string folder = "/node" + std::to_string(node);
    for (int local = 0; local < 2; ++local) {
      const int rank = node * 2 + local;
      e2e::Result r = e2e::run({e2e::kMemtrace, "run", "--sim", "--append", "-o", traces + folder, "--",
                                e2e::sample_path("train_loop"), "--steps", std::to_string(2 + rank % 3)},
                               {"RANK=" + std::to_string(rank), "LOCAL_RANK=" + std::to_string(local), "WORLD_SIZE=8"});
      ASSERT_EQ(r.status, 0) << r.err;
    }
    e2e::Result s = e2e::run({e2e::kMemtrace, "summarize", traces + folder});
    ASSERT_EQ(s.status, 0) << s.err;
    EXPECT_NE(s.err.find("2 summaries beside the traces"), std::string::npos) << s.err;
    std::filesystem::create_directories(summaries + folder);
    for (const auto& entry : std::filesystem::directory_iterator(traces + folder))
      if (entry.path().extension() == ".memsum")
        std::filesystem::copy_file(entry.path(), summaries + folder + "/" + entry.path().filename().string());
  }
  auto same_but_folder = [&](std::string text) {
    for (size_t at; (at = text.find(summaries)) != std::string::npos;) text.replace(at, summaries.size(), traces);
    return text;
  };
  for (std::vector<std::string> command : {std::vector<std::string>{"peak", "--json"},
                                           {"leaks", "--json"},
                                           {"report", "--json"},
                                           {"peak"},
                                           {"check", "--max-peak", "1GiB", "--json"}}) {
    std::vector<std::string> from_traces{e2e::kMemtrace}, from_summaries{e2e::kMemtrace};
    from_traces.insert(from_traces.end(), command.begin(), command.end());
    from_summaries.insert(from_summaries.end(), command.begin(), command.end());
    from_traces.push_back(traces);
    from_summaries.push_back(summaries);
    e2e::Result t = e2e::run(from_traces), s = e2e::run(from_summaries);
    ASSERT_EQ(t.status, 0) << command[0] << ": " << t.err;
    EXPECT_EQ(s.status, 0) << command[0] << ": " << s.err;
    EXPECT_EQ(same_but_folder(s.out), t.out) << command[0];
  }
  nlohmann::json peak = e2e::command_json({e2e::kMemtrace, "peak", "--json", summaries});
  ASSERT_EQ(peak["processes"].size(), 8u);
  for (int rank = 0; rank < 8; ++rank) EXPECT_EQ(peak["processes"][rank]["rank"], rank);

  e2e::Result exported = e2e::run({e2e::kMemtrace, "export", "--format", "jsonl", summaries});
  EXPECT_EQ(exported.status, 2);
  EXPECT_NE(exported.err.find("summaries of traces only"), std::string::npos) << exported.err;
  e2e::Result other = e2e::run({e2e::kMemtrace, "peak", "--top", "3", summaries});
  EXPECT_EQ(other.status, 2);
  EXPECT_NE(other.err.find("memtrace summarize --by user --top 3"), std::string::npos) << other.err;

  // The job page needs only what every summary has; a rank's own page needs summarize --html.
  const std::string page = summaries + "/job.html", pages = summaries + "/job-processes";
  e2e::Result html = e2e::run({e2e::kMemtrace, "html", summaries, "-o", page});
  ASSERT_EQ(html.status, 0) << html.err;
  EXPECT_NE(html.err.find("8 processes have no page of their own"), std::string::npos) << html.err;
  EXPECT_NE(html.err.find("memtrace summarize --html"), std::string::npos) << html.err;
  EXPECT_TRUE(std::filesystem::is_empty(pages));
  // The nodes' runs, one after another here, on one time axis: each node's ranks start later.
  const std::string job = read_file(page);
  const size_t data_at = job.find('>', job.find("<script id=\"memtrace-data\"")) + 1;
  nlohmann::json data = nlohmann::json::parse(job.substr(data_at, job.find("</script>", data_at) - data_at));
  ASSERT_EQ(data["processes"].size(), 8u);
  EXPECT_EQ(data["processes"][0]["start_ns"], 0);
  for (int rank = 2; rank < 8; rank += 2)
    EXPECT_GT(data["processes"][rank]["start_ns"], data["processes"][rank - 2]["start_ns"]) << rank;
  e2e::Result again = e2e::run({e2e::kMemtrace, "summarize", "--html", traces + "/node2"});
  ASSERT_EQ(again.status, 0) << again.err;
  for (const auto& entry : std::filesystem::directory_iterator(traces + "/node2"))
    if (entry.path().extension() == ".memsum")
      std::filesystem::copy_file(entry.path(), summaries + "/node2/" + entry.path().filename().string(),
                                 std::filesystem::copy_options::overwrite_existing);
  html = e2e::run({e2e::kMemtrace, "html", summaries, "-o", page});
  ASSERT_EQ(html.status, 0) << html.err;
  EXPECT_NE(html.err.find("6 processes have no page of their own"), std::string::npos) << html.err;
  EXPECT_TRUE(std::filesystem::exists(pages + "/rank-00004.html"));
  EXPECT_TRUE(std::filesystem::exists(pages + "/rank-00005.html"));
  EXPECT_FALSE(std::filesystem::exists(pages + "/rank-00003.html"));
}

}  // namespace

namespace {

using nlohmann::json;

// The device layer: memtrace samples what the device has in use (cudaMemGetInfo) and every
// report shows what lies outside the reserved layer (on the simulated device: its context, a
// fixed MEMTRACE_SIM_CONTEXT_BYTES), so that device >= reserved >= allocated add up.
TEST(DeviceLayer, EveryReportShowsWhatLiesOutsideTheReservedLayer) {
  std::string dir = e2e::temp_dir("device_layer");
  e2e::Result r = e2e::run_traced(
      dir, {"/usr/bin/env", "MEMTRACE_SIM_CONTEXT_BYTES=200MiB", e2e::sample_path("train_loop"), "--steps", "5"});
  ASSERT_EQ(r.status, 0) << r.err;
  json d = e2e::report_json(dir + "/traces")["processes"][0]["devices"][0];
  EXPECT_GT(d["device_samples"].get<int>(), 0);
  EXPECT_EQ(d["outside_reserved_at_peak_bytes"], 200u << 20) << d.dump(2);
  EXPECT_EQ(d["device_at_peak_bytes"].get<uint64_t>(), d["peak_reserved_bytes"].get<uint64_t>() + (200u << 20));
  EXPECT_GE(d["device_used_max_sampled_bytes"].get<uint64_t>(), 200u << 20);

  e2e::Result text = e2e::run({e2e::kMemtrace, "report", dir + "/traces"});
  EXPECT_NE(text.out.find("device used at the peak"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("200 MiB outside it"), std::string::npos) << text.out;

  json peak = e2e::command_json({e2e::kMemtrace, "peak", "--layer", "device", "--json", dir + "/traces"});
  EXPECT_EQ(peak["layer"], "device");
  json pd = peak["processes"][0]["devices"][0];
  EXPECT_EQ(pd["peak_bytes"], d["device_at_peak_bytes"]);
  bool outside = false;
  for (const json& s : pd["sites"])
    if (s["api"] == "device.used") {
      outside = true;
      EXPECT_EQ(s["bytes"], 200u << 20);
    }
  EXPECT_TRUE(outside) << pd.dump(2);
}

TEST(DeviceLayer, AnImportHasNoSamplesAndSaysSo) {
  json peak = e2e::command_json({e2e::kMemtrace, "peak", "--layer", "device", "--json",
                                 std::string(MEMTRACE_TEST_DATA) + "/torch/2.1-finetune.pickle"});
  EXPECT_EQ(peak["processes"][0]["layer_recorded"], false) << peak.dump(2);
}

}  // namespace
