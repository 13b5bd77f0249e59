#include "memtrace/engine/timeline.h"

#include <algorithm>

namespace memtrace {

void Timeline::widen() {
  width_ *= 2;
  for (auto& [key, buckets] : series_) {
    std::vector<Bucket> merged((buckets.size() + 1) / 2);
    for (size_t i = 0; i < buckets.size(); ++i) {
      Bucket& m = merged[i / 2];
      if (!buckets[i].touched) continue;
      m.max = m.touched ? std::max(m.max, buckets[i].max) : buckets[i].max;
      m.last = buckets[i].last;
      m.touched = true;
    }
    buckets = std::move(merged);
  }
}

void Timeline::record(int32_t device, Layer layer, uint64_t t_ns, uint64_t bytes) {
  while (t_ns / width_ >= kBuckets) widen();
  std::vector<Bucket>& buckets = series_[{device, layer}];
  size_t i = static_cast<size_t>(t_ns / width_);
  if (buckets.size() <= i) buckets.resize(i + 1);
  Bucket& b = buckets[i];
  b.max = b.touched ? std::max(b.max, bytes) : bytes;
  b.last = bytes;
  b.touched = true;
}

std::vector<TimelineSeries> Timeline::series(uint64_t end_ns) {
  while (end_ns / width_ >= kBuckets) widen();
  std::vector<TimelineSeries> out;
  const size_t end_bucket = std::min<size_t>(kBuckets - 1, static_cast<size_t>(end_ns / width_));
  for (const auto& [key, buckets] : series_) {
    TimelineSeries s;
    s.device = key.first;
    s.layer = key.second;
    uint64_t value = 0;
    for (size_t i = 0; i <= std::max(end_bucket, buckets.empty() ? 0 : buckets.size() - 1); ++i) {
      TimelinePoint p{i * width_, value, value};
      if (i < buckets.size() && buckets[i].touched) {
        p.max_bytes = std::max(buckets[i].max, value);  // the value before the first change counts too
        p.last_bytes = value = buckets[i].last;
      }
      s.points.push_back(p);
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace memtrace
