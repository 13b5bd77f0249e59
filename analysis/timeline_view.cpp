#include <algorithm>
#include <cstdio>

#include "memtrace/analysis/report_render.h"
#include "memtrace/analysis/units.h"
#include "memtrace/analysis/views.h"

namespace memtrace {

namespace {

std::string series_name(const ProcessAnalysis& p, const TimelineSeries& s) {
  return "pid " + std::to_string(p.report.pid) + " device " + std::to_string(s.device) + " " +
         std::string(layer_name(s.layer));
}

// The highest value in each of WIDTH equal slices of the series.
std::vector<uint64_t> columns(const TimelineSeries& s, size_t width) {
  std::vector<uint64_t> out(width, 0);
  if (s.points.empty()) return out;
  for (size_t i = 0; i < s.points.size(); ++i) {
    size_t c = i * width / s.points.size();
    out[c] = std::max(out[c], s.points[i].max_bytes);
  }
  for (size_t c = 1; c < width; ++c)  // a slice no bucket fell in holds the value before it
    if (out[c] == 0 && c * s.points.size() / width == (c - 1) * s.points.size() / width) out[c] = out[c - 1];
  return out;
}

}  // namespace

std::string timeline_text(const std::vector<ProcessAnalysis>& processes, size_t width) {
  constexpr int kRows = 8;
  static const char* kBlocks[] = {" ", "▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
  std::string out;
  for (const ProcessAnalysis& p : processes)
    for (const TimelineSeries& s : p.timeline) {
      std::vector<uint64_t> col = columns(s, width);
      uint64_t top = *std::max_element(col.begin(), col.end());
      out += series_name(p, s) + ": peak " + format_bytes(top) + " over " + format_duration_ns(p.report.end_time_ns) +
             "\n";
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
      out += std::string(12, ' ') + "0" + pad(format_duration_ns(p.report.end_time_ns), width - 1, true) + "\n\n";
    }
  if (out.empty()) out = "no device memory was allocated\n";
  return out;
}

nlohmann::json timeline_json(const std::vector<ProcessAnalysis>& processes) {
  nlohmann::json out = {{"processes", nlohmann::json::array()}};
  for (const ProcessAnalysis& p : processes) {
    nlohmann::json series = nlohmann::json::array();
    for (const TimelineSeries& s : p.timeline) {
      nlohmann::json points = nlohmann::json::array();
      for (const TimelinePoint& pt : s.points) points.push_back({pt.t_ns, pt.max_bytes, pt.last_bytes});
      series.push_back({{"device", s.device},
                        {"layer", std::string(layer_name(s.layer))},
                        {"columns", {"t_ns", "max_bytes", "last_bytes"}},
                        {"points", points}});
    }
    out["processes"].push_back({{"pid", p.report.pid},
                                {"bucket_ns", p.timeline_bucket_ns},
                                {"end_ns", p.report.end_time_ns},
                                {"series", series},
                                {"steps_ns", p.step_starts}});
  }
  return out;
}

std::string timeline_csv(const std::vector<ProcessAnalysis>& processes) {
  std::string out = "pid,device,layer,t_ns,max_bytes,last_bytes\n";
  for (const ProcessAnalysis& p : processes)
    for (const TimelineSeries& s : p.timeline)
      for (const TimelinePoint& pt : s.points)
        out += std::to_string(p.report.pid) + "," + std::to_string(s.device) + "," + std::string(layer_name(s.layer)) +
               "," + std::to_string(pt.t_ns) + "," + std::to_string(pt.max_bytes) + "," +
               std::to_string(pt.last_bytes) + "\n";
  return out;
}

std::string timeline_svg(const std::vector<ProcessAnalysis>& processes) {
  constexpr double kW = 960, kH = 240, kLeft = 80, kTop = 30, kGap = 40;
  static const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"};
  size_t charts = 0;
  for (const ProcessAnalysis& p : processes) charts += p.timeline.empty() ? 0 : 1;
  double height = kTop + static_cast<double>(charts) * (kH + kGap) + 10;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" "
                "font-size=\"11\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
                "<text x=\"%.0f\" y=\"18\" font-size=\"14\">memtrace timeline: device memory over time</text>\n",
                kLeft + kW + 20, height, kLeft);
  std::string out = buf;
  double y0 = kTop;
  for (const ProcessAnalysis& p : processes) {
    if (p.timeline.empty()) continue;
    double end = static_cast<double>(std::max<uint64_t>(p.report.end_time_ns, 1));
    uint64_t top = 1;
    for (const TimelineSeries& s : p.timeline)
      for (const TimelinePoint& pt : s.points) top = std::max(top, pt.max_bytes);
    auto x = [&](uint64_t t) { return kLeft + static_cast<double>(t) / end * kW; };
    auto y = [&](uint64_t b) { return y0 + kH - static_cast<double>(b) / static_cast<double>(top) * kH; };
    // Phases: the outermost ranges, shaded; steps as thin lines.
    size_t shaded = 0;
    for (const PhaseRange& r : p.ranges) {
      if (r.depth != 0 || ++shaded > 2000) continue;
      std::snprintf(buf, sizeof buf,
                    "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\" opacity=\"0.12\">"
                    "<title>",
                    x(r.start_ns), y0, std::max(0.5, x(r.end_ns) - x(r.start_ns)), kH, shaded % 2 ? "#888" : "#bbb");
      out += buf + escape_xml(r.name) + "</title></rect>\n";
    }
    for (uint64_t t : p.step_starts) {
      std::snprintf(buf, sizeof buf,
                    "<line x1=\"%.2f\" x2=\"%.2f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#999\" stroke-width=\"0.5\"/>\n",
                    x(t), x(t), y0, y0 + kH);
      out += buf;
    }
    std::snprintf(buf, sizeof buf,
                  "<rect x=\"%.0f\" y=\"%.1f\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" stroke=\"#333\"/>\n"
                  "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">",
                  kLeft, y0, kW, kH, kLeft - 4, y0 + 10);
    out += buf + format_bytes(top) + "</text>\n";
    std::snprintf(buf, sizeof buf, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">0</text>\n", kLeft - 4, y0 + kH);
    out += buf;
    std::snprintf(buf, sizeof buf, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">", kLeft + kW, y0 + kH + 14);
    out += buf + format_duration_ns(p.report.end_time_ns) + "</text>\n";
    size_t color = 0;
    for (const TimelineSeries& s : p.timeline) {
      std::string points;
      uint64_t prev = 0;
      for (const TimelinePoint& pt : s.points) {  // a step line: the value before, then the highest
        std::snprintf(buf, sizeof buf, "%.2f,%.2f %.2f,%.2f ", x(pt.t_ns), y(prev), x(pt.t_ns), y(pt.max_bytes));
        points += buf;
        prev = pt.last_bytes;
      }
      const char* c = kColors[color % std::size(kColors)];
      std::snprintf(buf, sizeof buf, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.2\" points=\"", c);
      out += buf + points + "\"/>\n";
      std::snprintf(buf, sizeof buf, "<text x=\"%.0f\" y=\"%.1f\" fill=\"%s\">", kLeft + 6,
                    y0 + 14 + 13.0 * static_cast<double>(color), c);
      out += buf + escape_xml(series_name(p, s)) + "</text>\n";
      ++color;
    }
    y0 += kH + kGap;
  }
  return out + "</svg>\n";
}

}  // namespace memtrace
