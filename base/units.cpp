#include "memtrace/base/units.h"

#include <cctype>
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

std::string counted(uint64_t n, std::string_view noun, std::string_view plural) {
  std::string out = std::to_string(n) + " ";
  if (n == 1) return out.append(noun);
  return plural.empty() ? out.append(noun).append("s") : out.append(plural);
}

std::string format_count(double count) {
  static const char* const kUnits[] = {"", " K", " M", " B", " T"};
  int unit = 0;
  while (count >= 999.5 && unit < 4) {
    count /= 1000;
    ++unit;
  }
  char text[32];
  if (unit == 0)
    std::snprintf(text, sizeof text, "%.0f", count);
  else
    std::snprintf(text, sizeof text,
                  count < 9.995   ? "%.2f%s"
                  : count < 99.95 ? "%.1f%s"
                                  : "%.0f%s",
                  count, kUnits[unit]);
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
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  // KB, MB, GB, TB are decimal, as disks and the SI write them; KiB, MiB, GiB, TiB binary, as
  // CUDA and PyTorch report memory; a bare K, M, G, T is binary, as in ulimit and docker.
  static const struct {
    const char* name;
    double scale;
  } kUnits[] = {{"", 1},      {"b", 1},        {"k", 0x1p10}, {"kb", 1e3},  {"kib", 0x1p10}, {"m", 0x1p20},
                {"mb", 1e6},  {"mib", 0x1p20}, {"g", 0x1p30}, {"gb", 1e9},  {"gib", 0x1p30}, {"t", 0x1p40},
                {"tb", 1e12}, {"tib", 0x1p40}, {"p", 0x1p50}, {"pb", 1e15}, {"pib", 0x1p50}};
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
  double scale = unit == "" || unit == "s" ? 1e9
                 : unit == "ms"            ? 1e6
                 : unit == "us"            ? 1e3
                 : unit == "ns"            ? 1
                 : unit == "m"             ? 60e9
                 : unit == "h"             ? 3600e9
                                           : 0;
  if (scale == 0 || value * scale >= 0x1p63) return std::nullopt;
  return static_cast<uint64_t>(value * scale);
}

}  // namespace memtrace
