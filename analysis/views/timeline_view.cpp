#include <algorithm>
#include <cstdio>
#include <tuple>

#include "memtrace/base/units.h"
#include "memtrace/views/report_render.h"
#include "memtrace/views/views.h"

namespace memtrace {

namespace {

std::string series_name(const ProcessAnalysis& p, const TimelineSeries& s) {
  return process_label(process_id(p.report)) + " device " + std::to_string(s.device) + " " +
         std::string(layer_name(s.layer));
}

// Step N's start, or its end (the next step's start, or the run's end).
uint64_t step_time(const ProcessAnalysis& p, uint64_t step, bool end) {
  const std::vector<uint64_t>& starts = p.step_starts;
  if (starts.empty()) return end ? p.report.end_time_ns : 0;
  size_t i = static_cast<size_t>(std::min<uint64_t>(step + (end ? 1 : 0), starts.size()));
  return i < starts.size() ? starts[i] : p.report.end_time_ns;
}

// The buckets of S that overlap [FROM, TO), and the value the series held when FROM came.
TimelineView::Series slice(const TimelineSeries& s, uint64_t bucket_ns, uint64_t from, uint64_t to) {
  TimelineView::Series out;
  out.device = s.device;
  out.layer = s.layer;
  for (const TimelinePoint& pt : s.points) {
    if (pt.t_ns + bucket_ns <= from) {
      out.before = pt.last_bytes;
      continue;
    }
    if (pt.t_ns >= to) break;
    out.points.push_back(pt);
  }
  return out;
}

// The highest value in each of WIDTH equal slices of [FROM, TO); a slice no bucket starts in
// holds the value the one before it ended with.
std::vector<uint64_t> columns(const TimelineView::Series& s, uint64_t bucket_ns, uint64_t from, uint64_t to,
                              size_t width) {
  std::vector<uint64_t> most(width, 0), last(width, 0);
  std::vector<bool> touched(width, false);
  const uint64_t span = to - from;
  auto column = [&](uint64_t t) {
    return t <= from ? 0 : std::min<size_t>(width - 1, static_cast<size_t>((t - from) * width / span));
  };
  for (const TimelinePoint& pt : s.points) {
    // A bucket wider than a column covers several.
    for (size_t c = column(pt.t_ns), end = column(std::min(pt.t_ns + bucket_ns - 1, to - 1)); c <= end; ++c) {
      most[c] = touched[c] ? std::max(most[c], pt.max_bytes) : pt.max_bytes;
      last[c] = pt.last_bytes;
      touched[c] = true;
    }
  }
  uint64_t carried = s.before;
  for (size_t c = 0; c < width; ++c) {
    if (!touched[c]) most[c] = carried;
    carried = touched[c] ? last[c] : carried;
  }
  return most;
}

// A time on an axis spanning SPAN: finer than format_duration_ns when the span is short.
std::string time_label(uint64_t t, uint64_t span) {
  if (span >= 10'000'000) return format_duration_ns(t);
  char text[32];
  std::snprintf(text, sizeof text, "%.3f ms", static_cast<double>(t) / 1e6);
  return text;
}

// WINDOW in a process's own times: [start, end], end > start.
std::pair<uint64_t, uint64_t> window_ns(const ProcessAnalysis& p, const TimeWindow& w) {
  const bool any_change = p.last_change_ns > 0 || p.first_change_ns > 0;
  uint64_t from = w.from.t_ns   ? *w.from.t_ns
                  : w.from.step ? step_time(p, *w.from.step, false)
                  : any_change  ? p.first_change_ns
                                : 0;
  uint64_t to = w.to.t_ns    ? *w.to.t_ns
                : w.to.step  ? step_time(p, *w.to.step, true)
                : any_change ? p.last_change_ns
                             : p.report.end_time_ns;
  if (!w.from.t_ns && !w.from.step && !w.to.t_ns && !w.to.step && any_change) {
    // The span with events, and a little room either side so the first and last changes show.
    uint64_t margin = std::max<uint64_t>((to - from) / 50, p.timeline_bucket_ns);
    from = from > margin ? from - margin : 0;
    to = std::min(to + margin, std::max(p.report.end_time_ns, to + 1));
  }
  if (to <= from) to = from + std::max<uint64_t>(p.timeline_bucket_ns, 1);
  return {from, to};
}

}  // namespace

std::optional<TimeBound> parse_time_bound(const std::string& text) {
  TimeBound bound;
  if (text.rfind("step:", 0) == 0) {
    char* end = nullptr;
    const char* digits = text.c_str() + 5;
    unsigned long long step = std::strtoull(digits, &end, 10);
    if (end == digits || *end || *digits == '-') return std::nullopt;
    bound.step = step;
    return bound;
  }
  auto ns = parse_duration_ns(text);
  if (!ns) return std::nullopt;
  bound.t_ns = *ns;
  return bound;
}

TimelineView timeline_view(const std::vector<ProcessAnalysis>& processes, const TimeWindow& window, bool by_owner) {
  TimelineView view;
  for (const ProcessAnalysis& p : processes) {
    TimelineView::Process& out = view.processes.emplace_back();
    out.id = process_id(p.report);
    out.bucket_ns = p.timeline_bucket_ns;
    out.end_ns = p.report.end_time_ns;
    std::tie(out.from_ns, out.to_ns) = window_ns(p, window);
    out.step_starts = p.step_starts;
    out.ranges = p.ranges;
    if (by_owner) {
      for (const OwnerSeries& o : p.owner_timeline) {
        out.series.push_back(slice(o.series, p.timeline_bucket_ns, out.from_ns, out.to_ns));
        out.series.back().owner = o.owner;
        out.series.back().name = series_name(p, o.series) + ", " + o.owner;
      }
      continue;
    }
    for (const TimelineSeries& s : p.timeline) {
      out.series.push_back(slice(s, p.timeline_bucket_ns, out.from_ns, out.to_ns));
      out.series.back().name = series_name(p, s);
    }
  }
  return view;
}

std::string to_text(const TimelineView& view, size_t width) {
  constexpr int kRows = 8;
  static const char* kBlocks[] = {" ", "▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
  std::string out;
  for (const TimelineView::Process& p : view.processes) {
    const uint64_t from = p.from_ns, to = p.to_ns;
    for (const TimelineView::Series& s : p.series) {
      std::vector<uint64_t> col = columns(s, p.bucket_ns, from, to, width);
      uint64_t top = *std::max_element(col.begin(), col.end());
      // The window shown, then the most it held in it (a peak is a moment, not the window).
      out += s.name + ", " + time_label(from, to - from) + " to " + time_label(to, to - from) + ": at most " +
             format_bytes(top) + "\n";
      for (int row = kRows - 1; row >= 0; --row) {
        out += row == kRows - 1 ? pad(format_bytes(top), 10, true) + " |" : std::string(10, ' ') + " |";
        for (uint64_t v : col) {
          double level = top ? static_cast<double>(v) / static_cast<double>(top) * kRows - row : 0;
          int eighths = static_cast<int>(std::clamp(level, 0.0, 1.0) * 8 + 0.5);
          out += kBlocks[eighths];
        }
        out += "\n";
      }
      out += std::string(10, ' ') + " +" + std::string(width, '-') + "\n";
      std::string steps(width, ' ');  // where each step begins
      bool any_step = false;
      for (uint64_t t : p.step_starts)
        if (t >= from && t < to) {
          steps[static_cast<size_t>((t - from) * width / (to - from))] = '^';
          any_step = true;
        }
      if (any_step) out += pad("steps", 10, true) + "  " + steps + "\n";
      std::string start = time_label(from, to - from);
      out += std::string(12, ' ') + start +
             pad(time_label(to, to - from), width > start.size() ? width - start.size() : 1, true) + "\n\n";
    }
  }
  if (out.empty()) out = "no device memory was allocated\n";
  return out;
}

nlohmann::json to_json(const TimelineView& view) {
  nlohmann::json out = {{"processes", nlohmann::json::array()}};
  for (const TimelineView::Process& p : view.processes) {
    nlohmann::json series = nlohmann::json::array();
    for (const TimelineView::Series& s : p.series) {
      nlohmann::json points = nlohmann::json::array();
      for (const TimelinePoint& pt : s.points) points.push_back({pt.t_ns, pt.max_bytes, pt.last_bytes});
      series.push_back({{"device", s.device},
                        {"layer", std::string(layer_name(s.layer))},
                        {"columns", {"t_ns", "max_bytes", "last_bytes"}},
                        {"points", points}});
      if (!s.owner.empty()) series.back()["owner"] = s.owner;
    }
    nlohmann::json process = process_json(p.id);  // which process, as every view says it
    process.update({{"bucket_ns", p.bucket_ns},
                    {"end_ns", p.end_ns},
                    {"from_ns", p.from_ns},
                    {"to_ns", p.to_ns},
                    {"series", series},
                    {"steps_ns", p.step_starts}});
    out["processes"].push_back(std::move(process));
  }
  return out;
}

std::string to_csv(const TimelineView& view) {
  bool owners = false;  // --by owner: a column more, whose series it is
  for (const TimelineView::Process& p : view.processes)
    for (const TimelineView::Series& s : p.series) owners |= !s.owner.empty();
  auto quoted = [](const std::string& field) {
    std::string q = "\"";
    for (char c : field) q += c == '"' ? std::string("\"\"") : std::string(1, c);
    return q + "\"";
  };
  std::string out = std::string("pid,device,layer,t_ns,max_bytes,last_bytes") + (owners ? ",owner" : "") + "\n";
  for (const TimelineView::Process& p : view.processes) {
    for (const TimelineView::Series& s : p.series)
      for (const TimelinePoint& pt : s.points)
        out += std::to_string(p.id.pid) + "," + std::to_string(s.device) + "," + std::string(layer_name(s.layer)) +
               "," + std::to_string(pt.t_ns) + "," + std::to_string(pt.max_bytes) + "," +
               std::to_string(pt.last_bytes) + (owners ? "," + quoted(s.owner) : "") + "\n";
  }
  return out;
}

std::string to_svg(const TimelineView& view) {
  // The chart, then its legend to the right of it, off the data.
  constexpr double kW = 960, kH = 240, kLeft = 90, kTop = 34, kGap = 70, kLegend = 260;
  static const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"};
  size_t charts = 0;
  for (const TimelineView::Process& p : view.processes) charts += p.series.empty() ? 0 : 1;
  double height = kTop + static_cast<double>(charts) * (kH + kGap) + 10;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" "
                "font-size=\"11\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
                "<text x=\"%.0f\" y=\"18\" font-size=\"14\">memtrace timeline: device memory over time</text>\n",
                kLeft + kW + kLegend, height, kLeft);
  std::string out = buf;
  double y0 = kTop + 16;
  for (const TimelineView::Process& p : view.processes) {
    if (p.series.empty()) continue;
    const uint64_t from = p.from_ns, to = p.to_ns;
    const double span = static_cast<double>(to - from);
    uint64_t top = 1;
    for (const TimelineView::Series& s : p.series) {
      top = std::max(top, s.before);
      for (const TimelinePoint& pt : s.points) top = std::max(top, pt.max_bytes);
    }
    auto x = [&](uint64_t t) {
      return kLeft + std::clamp(static_cast<double>(t) - static_cast<double>(from), 0.0, span) / span * kW;
    };
    auto y = [&](uint64_t b) { return y0 + kH - static_cast<double>(b) / static_cast<double>(top) * kH; };
    out += "<text x=\"" + std::to_string(static_cast<int>(kLeft)) + "\" y=\"" +
           std::to_string(static_cast<int>(y0 - 20)) + "\" font-size=\"12\">" +
           escape_xml(process_label(p.id) + ": " + command_line(p.id.command)) + "</text>\n";
    // Phases: the outermost ranges in the window, shaded in turn.
    size_t shaded = 0;
    for (const PhaseRange& r : p.ranges) {
      if (r.depth != 0 || r.end_ns <= from || r.start_ns >= to || ++shaded > 2000) continue;
      std::snprintf(buf, sizeof buf,
                    "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\" opacity=\"0.18\">"
                    "<title>",
                    x(r.start_ns), y0, std::max(0.5, x(r.end_ns) - x(r.start_ns)), kH, shaded % 2 ? "#888" : "#bbb");
      out += buf + escape_xml(r.name) + "</title></rect>\n";
    }
    // Steps: a dashed line at each start, numbered above the chart where there is room.
    double last_label = -1e9;
    for (size_t i = 0; i < p.step_starts.size(); ++i) {
      uint64_t t = p.step_starts[i];
      if (t < from || t >= to) continue;
      std::snprintf(buf, sizeof buf,
                    "<line x1=\"%.2f\" x2=\"%.2f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#555\" stroke-width=\"1\" "
                    "stroke-dasharray=\"3,2\"><title>step %zu</title></line>\n",
                    x(t), x(t), y0, y0 + kH, i);
      out += buf;
      if (x(t) - last_label >= 24) {
        std::snprintf(buf, sizeof buf, "<text x=\"%.2f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#555\">%zu</text>\n",
                      x(t), y0 - 4, i);
        out += buf;
        last_label = x(t);
      }
    }
    // Axes: the frame, bytes at five heights, time at six places, each axis named.
    std::snprintf(buf, sizeof buf,
                  "<rect x=\"%.0f\" y=\"%.1f\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" stroke=\"#333\"/>\n", kLeft,
                  y0, kW, kH);
    out += buf;
    for (int i = 0; i <= 4; ++i) {
      uint64_t bytes = top / 4 * static_cast<uint64_t>(i);
      std::snprintf(buf, sizeof buf,
                    "<line x1=\"%.0f\" x2=\"%.0f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>"
                    "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">",
                    kLeft - 4, kLeft, y(bytes), y(bytes), kLeft - 6, y(bytes) + 4);
      out += buf + (i == 4 ? format_bytes(top) : format_bytes(bytes)) + "</text>\n";
    }
    for (int i = 0; i <= 5; ++i) {
      uint64_t t = from + (to - from) / 5 * static_cast<uint64_t>(i);
      std::snprintf(buf, sizeof buf,
                    "<line x1=\"%.2f\" x2=\"%.2f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>"
                    "<text x=\"%.2f\" y=\"%.1f\" text-anchor=\"middle\">",
                    x(t), x(t), y0 + kH, y0 + kH + 4, x(t), y0 + kH + 16);
      out += buf + time_label(t, to - from) + "</text>\n";
    }
    std::snprintf(buf, sizeof buf,
                  "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"middle\">time since the program started%s</text>\n"
                  "<text transform=\"translate(%.0f,%.1f) rotate(-90)\" text-anchor=\"middle\">device memory</text>\n",
                  kLeft + kW / 2, y0 + kH + 32, p.step_starts.empty() ? "" : " (dashed: step starts)", 14.0,
                  y0 + kH / 2);
    out += buf;
    for (size_t i = 0; i < p.series.size(); ++i) {
      const TimelineView::Series& s = p.series[i];
      std::string points;
      uint64_t prev = s.before;
      std::snprintf(buf, sizeof buf, "%.2f,%.2f ", x(from), y(prev));
      points += buf;
      for (const TimelinePoint& pt : s.points) {  // a step line: the value before, the highest, the last
        const uint64_t end = pt.t_ns + p.bucket_ns;
        std::snprintf(buf, sizeof buf, "%.2f,%.2f %.2f,%.2f %.2f,%.2f %.2f,%.2f ", x(pt.t_ns), y(prev), x(pt.t_ns),
                      y(pt.max_bytes), x(end), y(pt.max_bytes), x(end), y(pt.last_bytes));
        points += buf;
        prev = pt.last_bytes;
      }
      std::snprintf(buf, sizeof buf, "%.2f,%.2f", x(to), y(prev));
      points += buf;
      const char* c = kColors[i % std::size(kColors)];
      std::snprintf(buf, sizeof buf, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.4\" points=\"", c);
      out += buf + points + "\"/>\n";
      double ly = y0 + 12 + 16.0 * static_cast<double>(i);
      std::snprintf(buf, sizeof buf,
                    "<line x1=\"%.0f\" x2=\"%.0f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"3\"/>"
                    "<text x=\"%.0f\" y=\"%.1f\">",
                    kLeft + kW + 14, kLeft + kW + 34, ly - 4, ly - 4, c, kLeft + kW + 40, ly);
      out += buf + escape_xml(s.name) + "</text>\n";
    }
    y0 += kH + kGap;
  }
  return out + "</svg>\n";
}

}  // namespace memtrace
