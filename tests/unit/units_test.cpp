#include "memtrace/base/units.h"

#include <gtest/gtest.h>

using memtrace::format_bytes;
using memtrace::format_duration_ns;
using memtrace::parse_size;

TEST(Units, FormatsBinaryUnits) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1024), "1.00 KiB");
  EXPECT_EQ(format_bytes(16ull << 20), "16.0 MiB");
  EXPECT_EQ(format_bytes(3ull << 29), "1.50 GiB");
  EXPECT_EQ(format_bytes(624ull << 20), "624 MiB");
}

TEST(Units, CountsReadAsWords) {
  EXPECT_EQ(memtrace::counted(1, "allocation"), "1 allocation");
  EXPECT_EQ(memtrace::counted(0, "allocation"), "0 allocations");
  EXPECT_EQ(memtrace::counted(12, "tensor"), "12 tensors");
  EXPECT_EQ(memtrace::counted(2, "process", "processes"), "2 processes");
}

TEST(Units, FormatsCountsAsPeopleWriteThem) {
  EXPECT_EQ(memtrace::format_count(124439808), "124 M");
  EXPECT_EQ(memtrace::format_count(8.0302e9), "8.03 B");
  EXPECT_EQ(memtrace::format_count(70.6e9), "70.6 B");
  EXPECT_EQ(memtrace::format_count(1.5e9), "1.50 B");
  EXPECT_EQ(memtrace::format_count(950), "950");
  EXPECT_EQ(memtrace::format_count(999999), "1.00 M");
}

TEST(Units, FormatsDurations) {
  EXPECT_EQ(format_duration_ns(532'000'000), "532.0 ms");
  EXPECT_EQ(format_duration_ns(1'532'000'000), "1.532 s");
  EXPECT_EQ(format_duration_ns(850'000), "850 us");
}

TEST(Units, ParsesSizesAsPeopleWriteThem) {
  EXPECT_EQ(parse_size("80GiB"), 80ull << 30);
  EXPECT_EQ(parse_size("80 GiB"), 80ull << 30);
  EXPECT_EQ(parse_size("512MiB"), 512ull << 20);
  EXPECT_EQ(parse_size("4G"), 4ull << 30);
  EXPECT_EQ(parse_size("1.5T"), 3ull << 39);
  EXPECT_EQ(parse_size("1000000"), 1000000u);
  EXPECT_EQ(parse_size("2e9"), 2000000000u);
  // Decimal units are powers of 10, binary ones powers of 2, in any case.
  EXPECT_EQ(parse_size("1GB"), 1000000000u);
  EXPECT_EQ(parse_size("2gb"), 2000000000u);
  EXPECT_EQ(parse_size("1.5 MB"), 1500000u);
  EXPECT_EQ(parse_size("4kB"), 4000u);
  EXPECT_EQ(parse_size("3TB"), 3000000000000u);
  EXPECT_EQ(parse_size("2gib"), 2ull << 30);
  EXPECT_EQ(parse_size("2g"), 2ull << 30);
  EXPECT_EQ(parse_size("7 b"), 7u);
  EXPECT_FALSE(parse_size(""));
  EXPECT_FALSE(parse_size("lots"));
  EXPECT_FALSE(parse_size("-1G"));
  EXPECT_FALSE(parse_size("12 parsecs"));
  EXPECT_FALSE(parse_size("1e30"));
}
