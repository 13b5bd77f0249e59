// Memory over time per device and layer, in bounded memory: time is cut into at most kBuckets
// buckets of equal width, each keeping the highest and the last value seen in it; when the trace
// runs past the last bucket, the width doubles and neighbouring buckets merge.
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "memtrace/format/api.h"

namespace memtrace {

struct TimelinePoint {
  uint64_t t_ns = 0;  // the bucket's start
  uint64_t max_bytes = 0;
  uint64_t last_bytes = 0;
};

struct TimelineSeries {
  int32_t device = -1;
  Layer layer = Layer::kReserved;
  std::vector<TimelinePoint> points;  // one per bucket, from time 0; a bucket without a change
                                      // carries the value before it
};

class Timeline {
 public:
  static constexpr size_t kBuckets = 4096;

  void record(int32_t device, Layer layer, uint64_t t_ns, uint64_t bytes);
  // The series, every one running to END_NS (buckets widen to reach it).
  std::vector<TimelineSeries> series(uint64_t end_ns);
  uint64_t bucket_ns() const { return width_; }

 private:
  struct Bucket {
    uint64_t max = 0, last = 0;
    bool touched = false;
  };
  void widen();

  uint64_t width_ = 1000;  // ns per bucket
  std::map<std::pair<int32_t, Layer>, std::vector<Bucket>> series_;
};

}  // namespace memtrace
