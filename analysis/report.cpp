#include "memtrace/analysis/report.h"

#include <algorithm>

namespace memtrace {

void ReportBuilder::add(const ReplayStep& step) {
  const Event& e = *step.event;
  ++events_;
  new_peak_ = false;
  ApiCounts& c = calls_[e.api];
  if (e.interrupted()) {  // the process died inside it: no result, no memory change known
    ++c.interrupted;
    return;
  }
  ++c.calls;
  if (!e.ok())
    ++c.failed;
  else
    c.bytes += step.size;
  if (!step.matched) ++unmatched_frees_;
  if (e.op() == Op::kAlloc && e.result == kOutOfMemoryResult)
    oom_events_.push_back(OomEvent{e.t_ns, e.api, e.size, e.device, e.device_free, e.device_total});
  for (const MemoryChange& change : step.device_changes) {
    if (change.layer != layer_) continue;
    DeviceState& d = devices_[change.device];
    if (change.bytes < 0 && d.peak_unsaved) {
      // The first decrease after a new peak: what is live now is what was live at the peak,
      // since nothing was allocated after it without making a higher one. Copying only here
      // keeps the cost at one copy per peak that is followed by a free.
      d.at_peak = d.sites;
      d.peak_unsaved = false;
    }
    Site key{change.site.api, site_key_ ? site_key_(change.site.stack_id) : change.site.stack_id};
    SiteLive& s = d.sites[key];
    if (s.count == 0) s.stack_id = change.site.stack_id;
    s.bytes += static_cast<uint64_t>(change.bytes);
    if (change.bytes > 0) {
      ++s.count;
      ++d.count;
    } else {
      --s.count;
      --d.count;
    }
    if (s.bytes == 0 && s.count == 0) d.sites.erase(key);
    d.live += static_cast<uint64_t>(change.bytes);
    if (d.live > d.peak) {
      d.peak = d.live;
      d.peak_time = e.t_ns;
      d.peak_tid = e.tid;
      d.peak_unsaved = true;
      new_peak_ = true;
    }
  }
  if (step.pinned_host_bytes) {
    pinned_host_live_ += static_cast<uint64_t>(step.pinned_host_bytes);
    pinned_host_peak_ = std::max(pinned_host_peak_, pinned_host_live_);
  }
}

std::vector<SiteTotal> ReportBuilder::largest(const SiteMap& sites) const {
  std::vector<SiteTotal> out;
  for (const auto& [site, live] : sites)
    if (live.bytes > 0) {
      SiteTotal total;
      total.site = Site{site.api, live.stack_id};
      total.bytes = live.bytes;
      total.count = live.count;
      out.push_back(std::move(total));
    }
  std::sort(out.begin(), out.end(), [](const SiteTotal& a, const SiteTotal& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.site.stack_id < b.site.stack_id;
  });
  if (out.size() > top_sites_) out.resize(top_sites_);
  return out;
}

void ReportBuilder::finish(ProcessReport& report) {
  report.calls = calls_;
  report.oom_events = oom_events_;
  report.unmatched_frees = unmatched_frees_;
  report.pinned_host_peak_bytes = pinned_host_peak_;
  report.devices.clear();
  for (auto& [ordinal, d] : devices_) {
    if (d.peak_unsaved) {
      d.at_peak = d.sites;
      d.peak_unsaved = false;
    }
    DeviceReport r;
    r.device = ordinal;
    r.peak_bytes = d.peak;
    r.peak_time_ns = d.peak_time;
    r.peak_tid = d.peak_tid;
    r.live_at_exit_bytes = d.live;
    r.live_at_exit_count = d.count;
    r.peak_sites = largest(d.at_peak);
    r.exit_sites = largest(d.sites);
    report.devices.push_back(std::move(r));
  }
}

}  // namespace memtrace
