// The job page: a run of several processes (a job's ranks, a program's workers) at a glance. Each
// process's memory over time is one row of a heat map, sampled into a fixed number of columns
// (one byte each), so the page stays small whatever the number of ranks; their peaks side by side
// with the imbalance, the outliers first; each process's own page one click away.
#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "html_assets.h"
#include "html_fill.h"
#include "memtrace/exports/html_report.h"
#include "memtrace/views/report_render.h"

namespace memtrace {

namespace {

using nlohmann::json;

constexpr size_t kColumns = 400;

std::string base64(const std::vector<uint8_t>& bytes) {
  static const char* digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t v = uint32_t(bytes[i]) << 16;
    if (i + 1 < bytes.size()) v |= uint32_t(bytes[i + 1]) << 8;
    if (i + 2 < bytes.size()) v |= bytes[i + 2];
    out += digits[(v >> 18) & 63];
    out += digits[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? digits[(v >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? digits[v & 63] : '=';
  }
  return out;
}

// The process's reserved memory per column of the job's time [0, SPAN), its own times counting from
// START: the most any of its devices held then.
std::vector<uint64_t> columns_of(const ProcessAnalysis& p, uint64_t start, uint64_t span) {
  std::vector<uint64_t> columns(kColumns, 0);
  const uint64_t bucket = std::max<uint64_t>(p.timeline_bucket_ns, 1);
  for (const TimelineSeries& s : p.timeline) {
    if (s.layer != Layer::kReserved) continue;
    for (const TimelinePoint& own : s.points) {
      const uint64_t t = start + own.t_ns;
      if (t >= span) break;
      const uint64_t end = std::min(span, t + bucket);
      const size_t first = static_cast<size_t>(t * kColumns / span);
      const size_t last = static_cast<size_t>(std::min<uint64_t>(kColumns - 1, (end - 1) * kColumns / span));
      for (size_t c = first; c <= last; ++c) columns[c] = std::max(columns[c], own.max_bytes);
    }
  }
  return columns;
}

uint64_t reserved_peak(const ProcessAnalysis& p, uint64_t& at_ns) {
  uint64_t peak = 0;
  at_ns = 0;
  for (const DeviceReport& d : p.report.devices)
    if (d.peak_bytes > peak) {
      peak = d.peak_bytes;
      at_ns = d.peak_time_ns;
    }
  return peak;
}

// Where each process's time 0 falls on the job's time axis: its run's origin on the wall clock, from
// the earliest (each node's `memtrace run` starts on its own); all at 0 when one's is unknown.
std::vector<uint64_t> starts_of(const std::vector<ProcessAnalysis>& processes) {
  std::vector<uint64_t> starts(processes.size(), 0);
  int64_t earliest = INT64_MAX;
  for (const ProcessAnalysis& p : processes) {
    if (p.report.origin_unix_ns <= 0) return starts;
    earliest = std::min(earliest, p.report.origin_unix_ns);
  }
  for (size_t i = 0; i < processes.size(); ++i)
    starts[i] = static_cast<uint64_t>(processes[i].report.origin_unix_ns - earliest);
  return starts;
}

}  // namespace

json job_data(const std::vector<ProcessAnalysis>& processes, const std::vector<std::string>& pages) {
  const std::vector<uint64_t> starts = starts_of(processes);
  uint64_t span = 1, most = 0;
  for (size_t i = 0; i < processes.size(); ++i) span = std::max(span, starts[i] + processes[i].report.end_time_ns);
  std::vector<std::vector<uint64_t>> rows;
  for (size_t i = 0; i < processes.size(); ++i) {
    rows.push_back(columns_of(processes[i], starts[i], span));
    for (uint64_t v : rows.back()) most = std::max(most, v);
  }
  json out = {{"version", MEMTRACE_VERSION}, {"span_ns", span}, {"columns", kColumns}, {"scale_bytes", most}};
  json list = json::array();
  for (size_t i = 0; i < processes.size(); ++i) {
    const ProcessReport& r = processes[i].report;
    std::vector<uint8_t> heat(kColumns);
    for (size_t c = 0; c < kColumns; ++c)
      heat[c] = most ? static_cast<uint8_t>(std::lround(255.0 * static_cast<double>(rows[i][c]) / double(most))) : 0;
    uint64_t peak_at = 0, live = 0;
    const uint64_t peak = reserved_peak(processes[i], peak_at);
    for (const DeviceReport& d : r.devices) live += d.live_at_exit_bytes;
    json p = {{"heading", process_heading(process_id(r))},
              {"pid", r.pid},
              {"rank", r.rank ? json(*r.rank) : json(nullptr)},
              {"host", r.host},
              {"peak_bytes", peak},
              {"peak_ns", peak_at},
              {"start_ns", starts[i]},
              {"end_ns", r.end_time_ns},
              {"live_at_end_bytes", live},
              {"ooms", r.oom_events.size()},
              {"heat", base64(heat)},
              {"page", i < pages.size() ? pages[i] : std::string()}};
    list.push_back(std::move(p));
  }
  out["processes"] = std::move(list);
  return out;
}

std::string job_page(const json& data) {
  return fill_page(html_assets::kJobPage, data, {{"/*@JOB_SCRIPT@*/", html_assets::kJobScript}});
}

}  // namespace memtrace
