#include "memtrace/views/verify.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "memtrace/base/units.h"
#include "memtrace/engine/pass.h"
#include "memtrace/engine/stacks.h"
#include "memtrace/engine/trace_set.h"

namespace memtrace {

namespace {

// CUPTI's memory records cover these kinds: not VMM handles and mappings, not address ranges.
bool compared_kind(MemKind kind) {
  return kind == MemKind::kDevice || kind == MemKind::kManaged || kind == MemKind::kPinnedHost;
}

// An allocation as both sides can name it.
using Key = std::tuple<uint64_t, uint64_t, MemKind>;  // address, size, kind

struct Side {
  uint64_t count = 0;
  UnmatchedAllocation example;
};

std::string hex(uint64_t v) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(v));
  return text;
}

std::string describe(const UnmatchedAllocation& a) {
  std::string s = format_bytes(a.size) + " " + std::string(mem_kind_name(a.kind)) + " at " + hex(a.addr);
  if (a.device >= 0) s += " on device " + std::to_string(a.device);
  if (a.api != Api::kCuptiMemoryAlloc) s += ", " + std::string(api_name(a.api));
  if (!a.location.empty()) s += " at " + a.location;
  return s;
}

nlohmann::json to_json(const UnmatchedAllocation& a) {
  return {{"api", std::string(api_name(a.api))},
          {"kind", std::string(mem_kind_name(a.kind))},
          {"device", a.device},
          {"addr", a.addr},
          {"size", a.size},
          {"location", a.location}};
}

}  // namespace

bool verify_trace(const std::string& path, size_t max_listed, VerifyResult& out, std::string& error) {
  std::unique_ptr<TraceReader> reader = open_trace(path, error);
  if (!reader) return false;
  reader->prefetch();
  out = VerifyResult();
  const pb::TraceHeader& h = reader->header();
  out.process.pid = h.pid();
  out.process.command.assign(h.command().begin(), h.command().end());
  out.process.trace = path;
  out.process.host = h.host();
  if (h.has_rank()) out.process.rank = h.rank();

  StackView stacks(*reader, false);
  std::map<Key, std::pair<Side, Side>> seen;  // recorded, CUPTI's
  FunctionPass compare([&](const Event& e, const ReplayStep&, const Replay&) {
    if (!compared_kind(e.kind) || !e.ok()) return;
    const bool cupti = e.api == Api::kCuptiMemoryAlloc;
    const bool recorded = !cupti && e.op() == Op::kAlloc && e.layer == Layer::kReserved && !e.captured() &&
                          api_info(e.api).layer == Layer::kReserved && !is_observation(e.api);
    if (!cupti && !recorded) return;
    auto& [mine, theirs] = seen[Key{e.addr, e.size, e.kind}];
    Side& side = cupti ? theirs : mine;
    if (side.count++ == 0) {
      side.example = UnmatchedAllocation{e.api, e.kind, e.device, e.addr, e.size, ""};
      if (recorded && e.stack_id)
        if (auto f = stacks.site_frame(e.stack_id, SiteGrouping::kUser)) side.example.location = frame_label(*f);
    }
    ++(cupti ? out.seen_by_cupti : out.recorded);
  });
  PassDriver().add(compare).run(*reader);
  out.has_records = out.seen_by_cupti > 0;
  for (const auto& [key, sides] : seen) {
    const auto& [mine, theirs] = sides;
    if (mine.count > theirs.count) {
      out.only_recorded_count += mine.count - theirs.count;
      if (out.only_recorded.size() < max_listed) out.only_recorded.push_back(mine.example);
    } else if (theirs.count > mine.count) {
      out.only_cupti_count += theirs.count - mine.count;
      if (out.only_cupti.size() < max_listed) out.only_cupti.push_back(theirs.example);
    }
  }
  return true;
}

bool VerifyView::compared() const {
  return std::all_of(processes.begin(), processes.end(), [](const VerifyResult& r) { return r.has_records; });
}

bool VerifyView::agree() const {
  return std::all_of(processes.begin(), processes.end(), [](const VerifyResult& r) { return r.agree(); });
}

std::string to_text(const VerifyView& view) {
  std::string out;
  for (const VerifyResult& r : view.processes) {
    out += process_heading(r.process);
    if (!r.has_records) {
      out +=
          "  no CUPTI memory records in this trace to compare with (memtrace run --verify makes them; its notes "
          "say why there are none)\n";
      continue;
    }
    out += "  " + counted(r.recorded, "allocation") + " recorded, " + std::to_string(r.seen_by_cupti) +
           " in CUPTI's memory records";
    out += r.agree() ? ": they agree\n" : "\n";
    auto list = [&](const char* what, uint64_t count, const std::vector<UnmatchedAllocation>& listed) {
      if (!count) return;
      out += "  " + std::to_string(count) + " " + what + ":\n";
      for (const UnmatchedAllocation& a : listed) out += "    " + describe(a) + "\n";
      if (count > listed.size()) out += "    and " + std::to_string(count - listed.size()) + " more\n";
    };
    list("seen by CUPTI and not recorded", r.only_cupti_count, r.only_cupti);
    list("recorded and not in CUPTI's records", r.only_recorded_count, r.only_recorded);
  }
  return out;
}

nlohmann::json to_json(const VerifyView& view) {
  nlohmann::json out = {{"processes", nlohmann::json::array()}};
  for (const VerifyResult& r : view.processes) {
    nlohmann::json p = process_json(r.process);
    nlohmann::json only_recorded = nlohmann::json::array(), only_cupti = nlohmann::json::array();
    for (const auto& a : r.only_recorded) only_recorded.push_back(to_json(a));
    for (const auto& a : r.only_cupti) only_cupti.push_back(to_json(a));
    p.update({{"has_cupti_records", r.has_records},
              {"recorded", r.recorded},
              {"seen_by_cupti", r.seen_by_cupti},
              {"agree", r.agree()},
              {"only_recorded_count", r.only_recorded_count},
              {"only_cupti_count", r.only_cupti_count},
              {"only_recorded", only_recorded},
              {"only_cupti", only_cupti}});
    out["processes"].push_back(std::move(p));
  }
  return out;
}

}  // namespace memtrace
