#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "memtrace/base/units.h"
#include "memtrace/views/report_render.h"
#include "memtrace/views/views.h"

namespace memtrace {

namespace {

struct Totals {
  std::map<int32_t, uint64_t> peak;  // by device, summed over processes
  uint64_t leaked = 0;
  uint64_t growth_per_step = 0;
  std::string growth_unmeasured;  // when no process has the steps to measure it: the first's reason
  std::map<std::pair<std::string, std::string>, const SiteTotal*> sites;  // at peak, (api, location)
  std::map<std::pair<std::string, std::string>, uint64_t> site_bytes;
  std::map<std::string, uint64_t> owners;  // who held the devices at their peaks (--by owner)
  // For the words: the tensors' peak (PyTorch's allocated layer), the free space inside its
  // segments at the peaks, and whether it grew segments by mapping (expandable_segments).
  uint64_t allocated_peak = 0, free_at_peak = 0;
  bool pytorch = false, expandable = false;
};

std::string site_name(const SiteTotal& s, SiteGrouping grouping) {
  if (grouping != SiteGrouping::kStack) return s.location;
  std::string name;
  for (const FrameView& f : s.stack) name += (name.empty() ? "" : " <- ") + frame_label(f);
  return name;
}

Totals totals(const std::vector<ProcessAnalysis>& processes, SiteGrouping grouping) {
  Totals t;
  bool measured = false;
  for (const ProcessAnalysis& p : processes) {
    std::string why = growth_unmeasured(p.step_starts.size(), p.step_pattern);
    measured |= why.empty();
    if (t.growth_unmeasured.empty()) t.growth_unmeasured = why;
    for (const DeviceReport& d : p.report.devices) {
      t.peak[d.device] += d.peak_bytes;
      t.leaked += d.live_at_exit_bytes;
      for (const OwnerShare& o : d.owners_at_peak) t.owners[o.owner] += o.bytes;
      for (const SiteTotal& s : d.peak_sites) {
        auto key = std::make_pair(std::string(api_name(s.site.api)), site_name(s, grouping));
        t.site_bytes[key] += s.bytes;
        t.sites.emplace(key, &s);
      }
    }
    for (const SiteGrowth& g : p.growth) t.growth_per_step += g.bytes_per_step;
    t.pytorch |= p.pytorch;
    t.expandable |= p.expandable_segments;
    if (p.has_allocated)
      for (const DeviceReport& d : p.allocated.devices) t.allocated_peak += d.peak_bytes;
    for (const FragmentationPoint& f : p.fragmentation)
      if (f.when == "peak") t.free_at_peak += f.space.free_bytes;
  }
  if (measured) t.growth_unmeasured.clear();
  return t;
}

std::string signed_bytes(int64_t v);

// "780 MiB, 25.0% more than the baseline's 624 MiB"
std::string compared(const DiffView::Change& c) {
  char pct[32];
  std::snprintf(pct, sizeof pct, "%.1f%%", std::abs(c.percent()));
  if (c.change() == 0) return format_bytes(c.next) + ", as in the baseline";
  if (c.base == 0) return format_bytes(c.next) + ", where the baseline had none";
  return format_bytes(c.next) + ", " + pct + (c.change() > 0 ? " more" : " less") + " than the baseline's " +
         format_bytes(c.base);
}

// What changed, in a few sentences, most important first.
std::vector<std::string> in_words(const Totals& b, const Totals& n, const DiffView& view) {
  std::vector<std::string> out;
  // The largest device's, as check --max-regression compares them (devices peak at different times).
  const DiffView::DevicePeak* largest = nullptr;
  for (const DiffView::DevicePeak& d : view.peaks)
    if (!largest || std::max(d.peak.base, d.peak.next) > std::max(largest->peak.base, largest->peak.next)) largest = &d;
  const DiffView::Change peak = largest ? largest->peak : DiffView::Change{};
  out.push_back("The new run's peak of reserved memory is " + compared(peak) +
                (view.peaks.size() > 1 ? " (device " + std::to_string(largest->device) + ", the largest)" : "") + ".");
  if (b.pytorch && n.pytorch && b.expandable != n.expandable) {
    const char* which = n.expandable ? "The new run uses expandable segments (PYTORCH_CUDA_ALLOC_CONF="
                                       "expandable_segments:True) and the baseline does not"
                                     : "The baseline uses expandable segments (PYTORCH_CUDA_ALLOC_CONF="
                                       "expandable_segments:True) and the new run does not";
    DiffView::Change tensors{b.allocated_peak, n.allocated_peak};
    std::string sentence = std::string(which) + ": free inside PyTorch's segments at the peak went from " +
                           format_bytes(b.free_at_peak) + " to " + format_bytes(n.free_at_peak) +
                           ", and the tensors' own peak is " + compared(tensors) + ".";
    const uint64_t slack = std::max<uint64_t>(tensors.base, tensors.next) / 100;  // within 1%: the same tensors
    if (static_cast<uint64_t>(std::abs(tensors.change())) <= slack && peak.change() != 0)
      sentence += " The reserved peak moved with the allocator's free space, not with the program's tensors.";
    sentence += " (Segments are made with cuMemCreate in one and cudaMalloc in the other, so their sites differ.)";
    out.push_back(sentence);
  }
  const bool same_allocator = b.expandable == n.expandable;  // else sites differ by API, not by growth
  if (same_allocator && !view.sites.empty() && view.sites.front().bytes.change() > 0)
    out.push_back("What grew most at the peak: " + view.sites.front().location + ", " +
                  signed_bytes(view.sites.front().bytes.change()) + ".");
  if (!view.owners.empty() && view.owners.front().bytes.change() > 0)
    out.push_back("Of who held the device at the peak, " + view.owners.front().owner +
                  " grew most: " + signed_bytes(view.owners.front().bytes.change()) + " (" +
                  format_bytes(view.owners.front().bytes.base) + " to " + format_bytes(view.owners.front().bytes.next) +
                  ").");
  if (view.live_at_exit.change() != 0) out.push_back("Live at exit: " + compared(view.live_at_exit) + ".");
  return out;
}

nlohmann::json change_json(const DiffView::Change& c) {
  return {{"base", c.base}, {"new", c.next}, {"change", c.change()}, {"percent", c.percent()}};
}

std::string signed_bytes(int64_t v) {
  return (v < 0 ? "-" : "+") + format_bytes(static_cast<uint64_t>(v < 0 ? -v : v));
}

}  // namespace

double DiffView::Change::percent() const {
  return base ? 100.0 * (static_cast<double>(next) - static_cast<double>(base)) / static_cast<double>(base)
              : (next ? 100.0 : 0.0);
}

DiffView diff_view(const std::vector<ProcessAnalysis>& base, const std::vector<ProcessAnalysis>& next,
                   SiteGrouping grouping) {
  Totals b = totals(base, grouping), n = totals(next, grouping);
  DiffView view;
  std::map<int32_t, bool> ordinals;
  for (auto& [d, v] : b.peak) ordinals[d] = true;
  for (auto& [d, v] : n.peak) ordinals[d] = true;
  for (auto& [d, unused] : ordinals) view.peaks.push_back({d, {b.peak[d], n.peak[d]}});
  view.live_at_exit = {b.leaked, n.leaked};
  view.growth_per_step = {b.growth_per_step, n.growth_per_step};
  if (!b.growth_unmeasured.empty() && b.growth_unmeasured == n.growth_unmeasured)
    view.growth_unmeasured = "each run " + b.growth_unmeasured;
  else if (!b.growth_unmeasured.empty())
    view.growth_unmeasured = "the base run " + b.growth_unmeasured;
  else if (!n.growth_unmeasured.empty())
    view.growth_unmeasured = "the new run " + n.growth_unmeasured;
  std::map<std::pair<std::string, std::string>, bool> keys;
  for (auto& [k, v] : b.site_bytes) keys[k] = true;
  for (auto& [k, v] : n.site_bytes) keys[k] = true;
  for (auto& [k, unused] : keys) {
    uint64_t before = b.site_bytes[k], after = n.site_bytes[k];
    if (before == after) continue;
    const SiteTotal* shown = n.sites.count(k) ? n.sites[k] : b.sites[k];
    view.sites.push_back({{before, after}, k.first, shown->location, shown->stack, shown->named_frame});
  }
  std::stable_sort(
      view.sites.begin(), view.sites.end(),
      [](const DiffView::SiteChange& x, const DiffView::SiteChange& y) { return x.bytes.change() > y.bytes.change(); });
  std::map<std::string, bool> owners;
  for (auto& [o, v] : b.owners) owners[o] = true;
  for (auto& [o, v] : n.owners) owners[o] = true;
  for (auto& [o, unused] : owners) view.owners.push_back({{b.owners[o], n.owners[o]}, o});
  std::stable_sort(view.owners.begin(), view.owners.end(),
                   [](const DiffView::OwnerChange& x, const DiffView::OwnerChange& y) {
                     return x.bytes.change() > y.bytes.change();
                   });
  view.summary = in_words(b, n, view);
  return view;
}

nlohmann::json to_json(const DiffView& view) {
  nlohmann::json devices = nlohmann::json::array();
  for (const DiffView::DevicePeak& d : view.peaks) {
    nlohmann::json c = change_json(d.peak);
    c["device"] = d.device;
    devices.push_back(c);
  }
  nlohmann::json sites = nlohmann::json::array();
  for (const DiffView::SiteChange& s : view.sites) {
    nlohmann::json c = change_json(s.bytes);
    c["api"] = s.api;
    c["location"] = s.location;
    c["stack"] = stack_json(s.stack);
    sites.push_back(std::move(c));
  }
  nlohmann::json out = {{"summary", view.summary},
                        {"peak", devices},
                        {"live_at_exit", change_json(view.live_at_exit)},
                        {"sites_at_peak", sites}};
  if (!view.owners.empty()) {
    nlohmann::json owners = nlohmann::json::array();
    for (const DiffView::OwnerChange& o : view.owners) {
      nlohmann::json c = change_json(o.bytes);
      c["owner"] = o.owner;
      owners.push_back(std::move(c));
    }
    out["owners_at_peak"] = owners;
  }
  out["growth_per_step"] = view.growth_unmeasured.empty() ? change_json(view.growth_per_step) : nlohmann::json();
  if (!view.growth_unmeasured.empty()) out["growth_per_step_unmeasured"] = view.growth_unmeasured;
  return out;
}

std::string to_text(const DiffView& view) {
  auto line = [](const std::string& what, const DiffView::Change& c) {
    char pct[32];
    std::snprintf(pct, sizeof pct, "%+.1f%%", c.percent());
    return "  " + pad(what, 28) + pad(format_bytes(c.base), 11, true) + " -> " + pad(format_bytes(c.next), 11, true) +
           "  " + pad(signed_bytes(c.change()), 12, true) + "  " + pct + "\n";
  };
  std::string out;
  for (const std::string& sentence : view.summary) out += sentence + "\n";
  out += "\nmemory, base -> new:\n";
  for (const DiffView::DevicePeak& d : view.peaks)
    out += line("peak reserved, device " + std::to_string(d.device), d.peak);
  out += line("live at exit", view.live_at_exit);
  if (view.growth_unmeasured.empty())
    out += line("growth per step", view.growth_per_step);
  else
    out += "  " + pad("growth per step", 28) + "not measured (" + view.growth_unmeasured + ")\n";
  if (!view.owners.empty()) {
    out += "\nwho held the device at the peak, base -> new:\n";
    for (const DiffView::OwnerChange& o : view.owners) out += line(o.owner, o.bytes);
  }
  if (view.sites.empty()) return out + "\nthe sites at the peak hold the same bytes\n";
  out += "\nsites at the peak that changed (largest growth first):\n";
  for (const DiffView::SiteChange& s : view.sites) {
    out += "  " + pad(signed_bytes(s.bytes.change()), 12, true) + "  " + pad(format_bytes(s.bytes.base), 10, true) +
           " -> " + pad(format_bytes(s.bytes.next), 10, true) + "  " + s.api + "  " + s.location + "\n";
    out += stack_text(s.stack, s.named_frame, 16, 4);
  }
  return out;
}

}  // namespace memtrace
