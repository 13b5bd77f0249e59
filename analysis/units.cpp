#include "memtrace/analysis/units.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace memtrace {

std::string format_bytes(uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 5) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, value < 10 ? "%.2f %s" : value < 100 ? "%.1f %s" : "%.0f %s", value, kUnits[unit]);
  return text;
}

std::string format_duration_ns(uint64_t ns) {
  char text[32];
  if (ns >= 1'000'000'000ull)
    std::snprintf(text, sizeof text, "%.3f s", static_cast<double>(ns) / 1e9);
  else if (ns >= 1'000'000ull)
    std::snprintf(text, sizeof text, "%.1f ms", static_cast<double>(ns) / 1e6);
  else
    std::snprintf(text, sizeof text, "%.0f us", static_cast<double>(ns) / 1e3);
  return text;
}

std::optional<uint64_t> parse_size(std::string_view text) {
  std::string s(text);
  while (!s.empty() && s.back() == ' ') s.pop_back();
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  double value = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || !std::isfinite(value) || value < 0) return std::nullopt;
  std::string unit(end);
  while (!unit.empty() && unit.front() == ' ') unit.erase(0, 1);
  static const struct {
    const char* name;
    double scale;
  } kUnits[] = {{"", 1},         {"B", 1},       {"K", 0x1p10},   {"KB", 0x1p10}, {"KiB", 0x1p10},
                {"M", 0x1p20},   {"MB", 0x1p20}, {"MiB", 0x1p20}, {"G", 0x1p30},  {"GB", 0x1p30},
                {"GiB", 0x1p30}, {"T", 0x1p40},  {"TB", 0x1p40},  {"TiB", 0x1p40}};
  for (const auto& u : kUnits) {
    if (unit == u.name) {
      double bytes = value * u.scale;
      if (bytes >= 0x1p64) return std::nullopt;
      return static_cast<uint64_t>(bytes);
    }
  }
  return std::nullopt;
}

std::optional<uint64_t> parse_duration_ns(std::string_view text) {
  std::string s(text);
  char* end = nullptr;
  double value = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || !std::isfinite(value) || value < 0) return std::nullopt;
  std::string unit(end);
  double scale = unit == "" || unit == "s" ? 1e9 : unit == "ms" ? 1e6 : unit == "m" ? 60e9 : unit == "h" ? 3600e9 : 0;
  if (scale == 0 || value * scale >= 0x1p63) return std::nullopt;
  return static_cast<uint64_t>(value * scale);
}

}  // namespace memtrace
