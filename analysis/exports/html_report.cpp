#include "memtrace/exports/html_report.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "html_assets.h"
#include "html_fill.h"
#include "memtrace/base/units.h"
#include "memtrace/engine/growth.h"
#include "memtrace/views/report_render.h"
#include "memtrace/views/snapshot_view.h"
#include "memtrace/views/views.h"

namespace memtrace {

namespace {

using nlohmann::json;

bool in_system_or_packages(const std::string& module) {
  for (const char* root : {"/usr/", "/lib/", "/lib64/", "/opt/"})
    if (module.rfind(root, 0) == 0) return true;
  // Python's packages (site-packages, dist-packages) and its own extension modules, wherever it is
  // installed (pyenv, conda).
  return module.find("-packages/") != std::string::npos || module.find("/lib-dynload/") != std::string::npos;
}

// Frames and stacks of one process, each written once and named by index.
class FrameTable {
 public:
  // The index of the stack STACK_ID as the page draws it: its site, and its frames innermost first.
  size_t stack(uint64_t stack_id, const ProcessAnalysis& p) {
    auto [it, fresh] = stack_index_.try_emplace(stack_id, stacks_.size());
    if (!fresh) return it->second;
    json frames = json::array();
    std::string site = "(no stack)";
    uint64_t group = 0;  // the site as the text views group it (a helper's: one per calling function)
    if (auto shown = p.stacks.find(stack_id); shown != p.stacks.end()) {
      site = shown->second.location;
      group = shown->second.user_group;
      // As text stacks show them: the interpreter's frames between Python ones, and the C
      // runtime's below main, say nothing.
      for (const FrameView& f : shown->second.stack)
        if (!is_interpreter_frame(f) && !is_startup_frame(f)) frames.push_back(frame(f));
    }
    // Named by a small number: a site key is 64 bits, more than a JavaScript number holds exactly.
    const size_t group_number = group ? group_number_.try_emplace(group, group_number_.size() + 1).first->second : 0;
    stacks_.push_back({{"site", site}, {"group", group_number}, {"frames", frames}});
    return it->second;
  }
  json frames() const { return frames_; }
  json stacks() const { return stacks_; }

 private:
  size_t frame(const FrameView& f) {
    auto [it, fresh] = frame_index_.try_emplace(f.id, frames_.size());
    if (!fresh) return it->second;
    // The user's own code is highlighted: Python outside the libraries; native code outside the
    // system's folders and Python's packages, and not the frameworks' plumbing.
    const bool user = f.python ? !StackView::is_python_library(f.file)
                               : !in_system_or_packages(f.module) && !StackView::is_framework_plumbing(f) &&
                                     !StackView::is_library_frame(f);
    frames_.push_back({{"name", short_function(f)}, {"label", frame_label(f)}, {"python", f.python}, {"user", user}});
    return it->second;
  }

  std::map<uint64_t, size_t> stack_index_, frame_index_, group_number_;
  json frames_ = json::array(), stacks_ = json::array();
};

const char* layer_key(Layer layer) { return layer == Layer::kAllocated ? "allocated" : "reserved"; }

json sites_json(const std::vector<SiteTotal>& sites, const ProcessAnalysis& p, FrameTable& table) {
  json out = json::array();
  for (const SiteTotal& s : sites)
    out.push_back({{"bytes", s.bytes},
                   {"count", s.count},
                   {"api", std::string(api_name(s.site.api))},
                   {"stack", table.stack(s.site.stack_id, p)}});
  return out;
}

// The first things the page says, in words: the peak and who holds most of it, the leak, and
// fragmentation (would expandable_segments help?), as the text commands answer them.
json findings(const ProcessAnalysis& p) {
  json out = json::array();
  for (const DeviceReport& d : p.report.devices) {
    // The page's sites are stacks: grouped as the text views group them, named by the largest.
    std::map<uint64_t, std::pair<uint64_t, const SiteTotal*>> by_site;
    for (const SiteTotal& s : d.peak_sites) {
      auto shown = p.stacks.find(s.site.stack_id);
      auto& [bytes, largest] = by_site[shown != p.stacks.end() ? shown->second.user_group : s.site.stack_id];
      bytes += s.bytes;
      if (!largest || s.bytes > largest->bytes) largest = &s;
    }
    auto top = std::max_element(by_site.begin(), by_site.end(),
                                [](const auto& a, const auto& b) { return a.second.first < b.second.first; });
    std::string text = format_bytes(d.peak_bytes) + " reserved on device " + std::to_string(d.device) + " at " +
                       format_duration_ns(d.peak_time_ns) +
                       (d.peak_step ? ", step " + std::to_string(d.peak_step) : "");
    if (top != by_site.end())
      text += "; the most of it from " + top->second.second->location + ": " + format_bytes(top->second.first) + " (" +
              percent(top->second.first, d.peak_bytes) + ")";
    for (const DeviceReport& a : p.allocated.devices)
      if (p.pytorch && a.device == d.device) text += "; PyTorch's tensors peaked at " + format_bytes(a.peak_bytes);
    out.push_back({{"kind", "peak"}, {"title", "Peak"}, {"text", text + "."}});
  }
  // Leaks as memtrace leaks counts them: in PyTorch's tensors when recorded (its cache is no leak).
  std::string leak;
  const std::string unmeasured = growth_unmeasured(p.step_starts.size(), p.step_pattern);
  if (!p.growth.empty()) {
    const SiteGrowth& g = p.growth.front();
    leak = g.location + " grows " + format_bytes(g.bytes_per_step) + " a step from step " +
           std::to_string(g.first_step) + " (rising in " + std::to_string(g.steps_rising) + " of " +
           std::to_string(g.intervals) + ")" +
           (p.growth.size() > 1 ? "; " + counted(p.growth.size() - 1, "other site") + " grow too" : "") + ".";
  } else if (unmeasured.empty()) {
    leak = "Nothing grows step by step over the " + counted(p.step_starts.size(), "step") + ".";
  } else {
    leak = "Growth per step not measured: " + unmeasured + ".";
  }
  uint64_t live = 0;
  for (const DeviceReport& d : (p.pytorch ? p.allocated : p.report).devices) live += d.live_at_exit_bytes;
  leak += " " + format_bytes(live) + (p.pytorch ? " in tensors" : "") + " still live at the end.";
  out.push_back({{"kind", "leak"}, {"title", "Leaks"}, {"text", leak}});
  std::string fragmentation = expandable_segments_answer(p);
  if (fragmentation.empty())
    for (const FragmentationPoint& f : p.fragmentation)
      if (f.when == "peak")
        fragmentation = "At the peak on device " + std::to_string(f.device) + ", " + format_bytes(f.space.free_bytes) +
                        " was free inside the allocator's heaps, in holes of at most " +
                        format_bytes(f.space.largest_free) + ".";
  if (!fragmentation.empty())
    out.push_back({{"kind", "fragmentation"}, {"title", "Fragmentation"}, {"text", fragmentation}});
  return out;
}

json process_data(const ProcessAnalysis& p) {
  const ProcessReport& r = p.report;
  FrameTable table;
  json out = process_json(process_id(r));
  out["heading"] = process_heading(process_id(r));
  out["events"] = r.events;
  out["end_ns"] = r.end_time_ns;
  out["first_change_ns"] = p.first_change_ns;
  out["last_change_ns"] = p.last_change_ns;
  out["device_sampled_until_ns"] = p.last_device_sample_ns;
  out["findings"] = findings(p);
  out["complete"] = r.complete;
  out["problem"] = r.problem;
  out["end_reason"] = r.end_reason;
  if (r.exit_status) out["exit_status"] = *r.exit_status;
  out["pytorch"] = p.pytorch;

  json devices = json::array();
  for (const auto* layer : {&r, &p.allocated}) {
    if (layer == &p.allocated && !p.has_allocated) continue;
    const Layer which = layer == &r ? Layer::kReserved : Layer::kAllocated;
    for (const DeviceReport& d : layer->devices) {
      json device = device_json(d);
      device["layer"] = layer_key(which);
      device["peak_bytes"] = d.peak_bytes;
      device["peak_ns"] = d.peak_time_ns;
      device["peak_step"] = d.peak_step;
      device["peak_phase"] = d.peak_phase;
      device["live_at_exit_bytes"] = d.live_at_exit_bytes;
      if (which == Layer::kReserved && d.device_samples) device["device_at_peak_bytes"] = d.device_at_peak_bytes();
      if (which == Layer::kReserved && !d.owners_at_peak.empty()) {  // who held the device: the first screen's bar
        json owners = json::array();
        for (const OwnerShare& o : d.owners_at_peak)
          owners.push_back({{"owner", o.owner}, {"kind", owner_kind_name(o.kind)}, {"bytes", o.bytes}, {"why", o.why}});
        device["owners"] = owners;
      }
      device["peak_sites"] = sites_json(d.peak_sites, p, table);
      device["exit_sites"] = sites_json(d.exit_sites, p, table);
      devices.push_back(device);
    }
  }
  out["devices"] = devices;

  // Memory over time: each bucket's highest value, and its last.
  json series = json::array();
  auto add_series = [&](const TimelineSeries& s, const char* name) {
    json t = json::array(), max = json::array(), last = json::array();
    for (const TimelinePoint& point : s.points) {
      t.push_back(point.t_ns);
      max.push_back(point.max_bytes);
      last.push_back(point.last_bytes);
    }
    series.push_back({{"device", s.device}, {"layer", name}, {"t", t}, {"max", max}, {"last", last}});
  };
  for (const TimelineSeries& s : p.timeline) add_series(s, layer_key(s.layer));
  for (const TimelineSeries& s : p.free_in_heaps) add_series(s, "free in heaps");
  for (const TimelineSeries& s : p.device_used) add_series(s, "device in use (sampled)");
  out["bucket_ns"] = p.timeline_bucket_ns;
  out["series"] = series;
  out["steps"] = p.step_starts;
  json ranges = json::array();
  for (const PhaseRange& range : p.ranges)
    ranges.push_back({{"name", range.name}, {"start", range.start_ns}, {"end", range.end_ns}, {"depth", range.depth}});
  out["ranges"] = ranges;

  // The largest allocations one by one: [start, end (0: live at the end), bytes, device, layer
  // (0 reserved, 1 allocated), stack, api, address]; arrays keep a large page small.
  json largest = json::array();
  for (const AllocationSpan& a : p.largest)
    largest.push_back({a.start_ns, a.end_ns, a.bytes, a.device, a.layer == Layer::kAllocated ? 1 : 0,
                       table.stack(a.stack_id, p), std::string(api_name(a.api)), a.addr});
  out["largest"] = largest;
  out["allocations_seen"] = p.allocations_seen;

  // Growth as memtrace leaks measures it: with PyTorch's tensors recorded, theirs (its cache filling
  // up over the first steps is no leak).
  json growth = json::array();
  for (const auto* list : {&p.growth})
    for (const SiteGrowth& g : *list)
      growth.push_back({{"device", g.device},
                        {"layer", layer_key(g.layer)},
                        {"bytes_per_step", g.bytes_per_step},
                        {"first_step", g.first_step},
                        {"steps_rising", g.steps_rising},
                        {"intervals", g.intervals},
                        {"site", g.location},
                        {"stack", table.stack(g.site.stack_id, p)}});
  out["growth"] = growth;

  json fragmentation = json::array();
  for (const FragmentationPoint& f : p.fragmentation)
    fragmentation.push_back({{"when", f.when},
                             {"t", f.t_ns},
                             {"device", f.device},
                             {"reserved", f.reserved_bytes},
                             {"allocated", f.allocated_bytes},
                             {"heap_bytes", f.space.heap_bytes},
                             {"free", f.space.free_bytes},
                             {"largest_free", f.space.largest_free},
                             {"index", f.space.index()},
                             {"request", f.request_bytes}});
  out["fragmentation"] = fragmentation;

  json ooms = json::array();
  for (const OomEvent& o : r.oom_events)
    ooms.push_back({{"t", o.t_ns},
                    {"api", std::string(api_name(o.api))},
                    {"bytes", o.size},
                    {"device", o.device},
                    {"device_free", o.device_free_bytes},
                    {"device_total", o.device_total_bytes}});
  out["ooms"] = ooms;
  // The snapshots beside the trace (out of memory, on demand), as `memtrace snapshot` tells them.
  json snapshots = json::array();
  for (const std::string& path : r.snapshots) {
    SnapshotReport s;
    std::string error;
    json snapshot = {{"file", std::filesystem::path(path).filename().string()}};
    if (read_snapshot(path, AnalysisOptions(), s, error)) {
      snapshot["reason"] = s.reason;
      snapshot["diagnosis"] = s.diagnosis;
      snapshot["text"] = to_text(s);
    } else {
      snapshot["text"] = error;
    }
    snapshots.push_back(snapshot);
  }
  out["snapshots"] = snapshots;
  out["notices"] = r.notices;
  out["frames"] = table.frames();
  out["stacks"] = table.stacks();
  return out;
}

// TEXT with every MARK replaced by WITH.
void replace(std::string& text, std::string_view mark, std::string_view with) {
  size_t at = text.find(mark);
  if (at != std::string::npos) text.replace(at, mark.size(), with);
}

}  // namespace

AnalysisOptions html_analysis_options(const HtmlOptions& options) {
  AnalysisOptions a;
  a.top_sites = SIZE_MAX;  // the flame graph at the peak holds every stack
  a.grouping = SiteGrouping::kStack;
  a.labels = SiteGrouping::kUser;
  a.timeline = true;
  a.categories = false;  // what the page does not show
  a.owners = true;       // who held each device at its peak, on the first screen
  a.largest_allocations = options.largest_allocations;
  return a;
}

json html_data(const std::vector<ProcessAnalysis>& processes) {
  json data = {{"version", MEMTRACE_VERSION}, {"processes", json::array()}};
  for (const ProcessAnalysis& p : processes) data["processes"].push_back(process_data(p));
  return data;
}

#ifdef MEMTRACE_WITHOUT_UPLOT
namespace html_assets {
const std::string_view kUplotScript, kUplotStyle, kUplotLicense;  // not built in: no page is written
}
bool html_report_available() { return false; }
#else
bool html_report_available() { return true; }
#endif

std::string fill_page(std::string_view page_template, const json& data,
                      std::initializer_list<std::pair<std::string_view, std::string_view>> more) {
  // Inside <script>, "</script" would end it early and "<!--" changes how it is parsed: no '<' at
  // all, then (it can only stand inside a JSON string, where \u003c means it).
  std::string text = data.dump(-1, ' ', false, json::error_handler_t::replace);
  for (size_t at = 0; (at = text.find('<', at)) != std::string::npos; at += 6) text.replace(at, 1, "\\u003c");
  std::string page(page_template);
  std::string license(html_assets::kUplotLicense);
  for (size_t at = 0; (at = license.find_first_of("&<>", at)) != std::string::npos; at += 4)
    license.replace(at, 1, license[at] == '&' ? "&amp;" : license[at] == '<' ? "&lt;" : "&gt;");
  replace(page, "@UPLOT_LICENSE@", license);
  replace(page, "/*@UPLOT_STYLE@*/", html_assets::kUplotStyle);
  replace(page, "/*@STYLE@*/", html_assets::kStyle);
  replace(page, "/*@UPLOT_SCRIPT@*/", html_assets::kUplotScript);
  replace(page, "/*@COMMON_SCRIPT@*/", html_assets::kCommonScript);
  for (const auto& [mark, with] : more) replace(page, mark, with);
  replace(page, "@DATA@", text);
  return page;
}

std::string html_page(const json& data) {
  return fill_page(html_assets::kPage, data, {{"/*@SCRIPT@*/", html_assets::kScript}});
}

}  // namespace memtrace
