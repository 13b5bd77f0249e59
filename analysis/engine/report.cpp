#include "memtrace/engine/report.h"

#include <algorithm>

namespace memtrace {

uint32_t ReportBuilder::new_slot_of(Api api, uint64_t stack_id) {
  constexpr uint64_t kCachedStacks = 1u << 24;
  Site key{api, site_key_ ? site_key_(stack_id) : stack_id};
  auto [it, fresh] = slots_.try_emplace(key, static_cast<uint32_t>(keys_.size()));
  if (fresh) keys_.push_back(key);
  if (stack_id < kCachedStacks) {
    if (by_stack_.size() <= stack_id) by_stack_.resize(stack_id + 1);
    StackSlots& c = by_stack_[stack_id];
    c.slot[1] = c.slot[0];
    c.api[1] = c.api[0];
    c.slot[0] = it->second + 1;
    c.api[0] = api;
  }
  return it->second;
}

ReportBuilder::DeviceState& ReportBuilder::new_device_state(int32_t device) {
  cached_state_ = &devices_[device];  // std::map's nodes stay put: the pointer stays good
  cached_device_ = device;
  return *cached_state_;
}

void ReportBuilder::add(const ReplayStep& step) {
  const Event& e = *step.event;
  ++events_;
  new_peak_ = false;
  if (is_observation(e.api)) {  // not a call: no row of its own
    if (e.api == Api::kDeviceUsed) {
      sample_device(e.device, e.size, e.t_ns);
    } else if (OutsideParts().part(e.api)) {
      if (layer_ == Layer::kReserved && devices_.count(e.device)) {  // read with the device.used that follows
        DeviceState& d = device_state(e.device);
        OutsideParts& parts = d.parts_latest;
        *parts.part(e.api) = e.size;
        if (e.api == Api::kDeviceProcessUsed) d.nvml_process_most = std::max(d.nvml_process_most, e.size);
        if (e.api == Api::kDeviceOtherProcesses) parts.other_processes_known = true;
      }
    } else if (e.api == Api::kCuptiMemoryAlloc || e.api == Api::kCuptiMemoryFree) {
      ++activity_records_;
    }
    return;
  }
  ApiCounts& c = calls_[static_cast<size_t>(e.api) < calls_.size() ? static_cast<size_t>(e.api) : 0];
  if (e.interrupted()) {  // the process died inside it: no result, no memory change known
    ++c.interrupted;
    return;
  }
  // An allocation held before recording started is no call the recording saw: live, not counted.
  if (!(e.flags & kEventBeforeRecording)) {
    ++c.calls;
    if (!e.ok()) {
      ++c.failed;
      c.last_failure = e.result;
    } else
      c.bytes += step.size;
  }
  if (!step.matched) ++unmatched_frees_;
  if (e.captured()) ++captured_events_;
  if (e.flags & kEventFromCupti) ++cupti_events_;
  if (e.op() == Op::kAlloc && e.result == kOutOfMemoryResult) {
    oom_events_.push_back(OomEvent{e.t_ns, e.api, e.size, e.device, e.device_free, e.device_total, {}});
    if (e.device_total > e.device_free) sample_device(e.device, e.device_total - e.device_free, e.t_ns);
  }
  for (const MemoryChange& change : step.memory_changes) {
    if (change.layer != layer_) continue;
    if ((e.flags & kEventBeforeRecording) && change.arrived) {
      Known& known = before_recording_[change.device];
      known.bytes += static_cast<uint64_t>(change.bytes);
      ++known.count;
    }
    DeviceState& d = device_state(change.device);
    if (top_sites_ > 0) {  // none kept: calls and peaks alone
      if (!change.arrived && d.peak_unsaved) {
        // The first decrease after a new peak: what is live now is what was live at the peak,
        // since nothing was allocated after it without making a higher one. Copying only here
        // keeps the cost at one copy per peak that is followed by a free.
        d.at_peak = d.sites;
        d.peak_unsaved = false;
      }
      const uint32_t slot = slot_of(change.site.api, change.site.stack_id);
      if (d.sites.size() <= slot) d.sites.resize(slot + 1);
      SiteLive& s = d.sites[slot];
      s.bytes += static_cast<uint64_t>(change.bytes);
      if (change.arrived) {
        // The newest allocation stands for the site: the likeliest to be live still (the first
        // may be a freed temporary of a helper whose later callers keep theirs).
        s.stack_id = change.site.stack_id;
        ++s.count;
      } else {
        --s.count;
      }
    }
    if (change.arrived)
      ++d.count;
    else
      --d.count;
    d.live += static_cast<uint64_t>(change.bytes);
    if (d.live > d.peak) {
      d.peak = d.live;
      d.peak_time = e.t_ns;
      d.peak_tid = e.tid;
      d.peak_unsaved = true;
      new_peak_ = true;
      d.peak_has_outside = d.samples > 0;
      d.outside_at_peak = d.outside_latest;
      d.outside_at_peak_time = d.outside_latest_time;
      d.parts_at_peak = d.parts_latest;
    }
  }
  if (step.pinned_host_bytes) {
    pinned_host_live_ += static_cast<uint64_t>(step.pinned_host_bytes);
    pinned_host_peak_ = std::max(pinned_host_peak_, pinned_host_live_);
  }
}

// Only the reserved layer's builder keeps the device layer: what lies outside the reserved layer
// is the sample minus what it holds.
void ReportBuilder::sample_device(int32_t device, uint64_t used, uint64_t t_ns) {
  if (layer_ == Layer::kReserved && device >= 0) first_samples_.try_emplace(device, Sample{used, t_ns});
  // A device nothing was reserved on (every allocation failed) gets no row from a sample.
  if (layer_ != Layer::kReserved || device < 0 || !devices_.count(device)) return;
  DeviceState& d = device_state(device);
  ++d.samples;
  d.used_max = std::max(d.used_max, used);
  d.outside_latest = used > d.live ? used - d.live : 0;
  d.outside_latest_time = t_ns;
  if (!d.peak_has_outside) {  // a peak before the first sample takes the first after it
    d.outside_at_peak = d.outside_latest;
    d.outside_at_peak_time = t_ns;
    d.parts_at_peak = d.parts_latest;
    d.peak_has_outside = true;
  }
}

void resolve_sites(std::vector<SiteTotal>& sites, const StackView& stacks, SiteGrouping grouping) {
  for (SiteTotal& s : sites) {
    resolve_site(s, s.site.stack_id, stacks, grouping);
    s.stack_flags = stacks.flags(s.site.stack_id);
  }
  distinguish_sites(sites);
}

std::vector<SiteTotal> ReportBuilder::largest(const SiteMap& sites) const {
  std::vector<SiteTotal> out;
  for (size_t slot = 0; slot < sites.size(); ++slot)
    if (const SiteLive& live = sites[slot]; live.bytes > 0) {
      SiteTotal total;
      total.site = Site{keys_[slot].api, live.stack_id};
      total.group = keys_[slot].stack_id;
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

std::vector<SiteTotal> ReportBuilder::live_sites(std::optional<int32_t> device) const {
  if (device) {
    auto it = devices_.find(*device);
    return it == devices_.end() ? std::vector<SiteTotal>() : largest(it->second.sites);
  }
  SiteMap all;
  for (const auto& [ordinal, d] : devices_) {
    if (all.size() < d.sites.size()) all.resize(d.sites.size());
    for (size_t slot = 0; slot < d.sites.size(); ++slot) {
      if (all[slot].count == 0) all[slot].stack_id = d.sites[slot].stack_id;
      all[slot].bytes += d.sites[slot].bytes;
      all[slot].count += d.sites[slot].count;
    }
  }
  return largest(all);
}

void ReportBuilder::finish(ProcessReport& report) {
  report.calls.clear();
  for (size_t api = 0; api < calls_.size(); ++api)
    if (calls_[api].calls || calls_[api].interrupted) report.calls[static_cast<Api>(api)] = calls_[api];
  report.oom_events = oom_events_;
  report.unmatched_frees = unmatched_frees_;
  report.captured_events = captured_events_;
  report.cupti_events = cupti_events_;
  report.activity_records = activity_records_;
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
    r.device_samples = d.samples;
    r.outside_reserved_at_peak_bytes = d.peak_has_outside ? d.outside_at_peak : 0;
    r.outside_sampled_at_ns = d.outside_at_peak_time;
    r.device_used_max_sampled_bytes = d.used_max;
    if (d.peak_has_outside) r.outside_parts_at_peak = d.parts_at_peak.within(r.outside_reserved_at_peak_bytes);
    r.outside_parts_at_peak.nvml_process = d.nvml_process_most;
    if (auto first = first_samples_.find(ordinal); first != first_samples_.end()) {
      r.first_sampled = true;
      r.first_sample_bytes = first->second.used;
      r.first_sample_ns = first->second.t_ns;
    }
    if (auto known = before_recording_.find(ordinal); known != before_recording_.end()) {
      r.before_recording_bytes = known->second.bytes;
      r.before_recording_count = known->second.count;
    }
    report.devices.push_back(std::move(r));
  }
}

}  // namespace memtrace
