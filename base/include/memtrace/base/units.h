// Sizes in binary units and times relative to the program's start, as every report prints them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace memtrace {

// "512 B", "16.0 MiB", "1.50 GiB": three significant digits.
std::string format_bytes(uint64_t bytes);
// Counts as people write them: "124 M", "8.03 B", "950", three significant digits.
std::string format_count(double count);
// "1 allocation", "3 allocations": N and the noun, singular for one (PLURAL, when given, for others).
std::string counted(uint64_t n, std::string_view noun, std::string_view plural = {});
// "0.532 s", "12.3 ms", "850 us".
std::string format_duration_ns(uint64_t ns);
// "80GiB", "80 GiB", "512MiB", "4G", "1.5T", "1000000", "2e9", "2GB": sizes as people write them,
// in any case. KB/MB/GB/TB are powers of 10; KiB/MiB/GiB/TiB and a bare K/M/G/T powers of 2.
std::optional<uint64_t> parse_size(std::string_view text);

// "30s", "500ms", "250us", "100ns", "5m", "1h", "2.5" (seconds).
std::optional<uint64_t> parse_duration_ns(std::string_view text);

}  // namespace memtrace
