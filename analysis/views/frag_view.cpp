#include <cstdio>

#include "memtrace/base/units.h"
#include "memtrace/views/report_render.h"
#include "memtrace/views/views.h"

namespace memtrace {

namespace {

// Whether the free space at P is fragmentation worth acting on: a tenth of what is reserved or more,
// in holes of at most half of it.
bool fragmented(const FragmentationPoint& p) {
  const FreeSpace& f = p.space;
  return f.free_bytes * 10 >= p.reserved_bytes && f.free_bytes > 0 && f.index() >= 0.5;
}

// What would help, when fragmentation is the problem; empty when it is not.
std::string advice(const FragmentationPoint& p) {
  const FreeSpace& f = p.space;
  if (p.when == "oom" && p.request_bytes > f.largest_free && p.request_bytes <= f.free_bytes)
    return "fragmentation caused this out-of-memory: " + format_bytes(f.free_bytes) +
           " was free inside the allocator's segments, but the largest hole was " + format_bytes(f.largest_free) +
           ", less than the " + format_bytes(p.request_bytes) +
           " asked for. With PyTorch, PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True lets segments grow "
           "instead of leaving holes; freeing large temporaries earlier, or allocating long-lived tensors first, "
           "also helps.";
  if (fragmented(p))
    return "memory is fragmented: " + format_bytes(f.free_bytes) + " free inside the segments, in holes of at most " +
           format_bytes(f.largest_free) +
           ". With PyTorch, PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True avoids most of it.";
  return {};
}

}  // namespace

std::string expandable_segments_answer(const ProcessAnalysis& p) {
  if (!p.pytorch || !p.has_heaps) return {};
  const std::string question = "Would expandable_segments help? ";
  if (p.expandable_segments)
    return question +
           "It is on in this run: PyTorch grows its segments in place, so what is free inside them is "
           "its cache, not holes between segments.";
  const FragmentationPoint* peak = nullptr;
  for (const FragmentationPoint& f : p.fragmentation) {
    if (f.when == "oom" && f.request_bytes > f.space.largest_free && f.request_bytes <= f.space.free_bytes)
      return question + "Yes: the out-of-memory at " + format_duration_ns(f.t_ns) + " asked for " +
             format_bytes(f.request_bytes) + " while " + format_bytes(f.space.free_bytes) +
             " was free inside PyTorch's segments, in holes of at most " + format_bytes(f.space.largest_free) +
             "; with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True segments grow instead of leaving holes.";
    if (f.when == "peak" && (!peak || f.reserved_bytes > peak->reserved_bytes)) peak = &f;
  }
  if (!peak) return {};
  const std::string free = format_bytes(peak->space.free_bytes) + " of the " + format_bytes(peak->reserved_bytes) +
                           " reserved (" + percent(peak->space.free_bytes, peak->reserved_bytes) + ")";
  if (fragmented(*peak))
    return question + "Likely: at the peak " + free + " was free inside PyTorch's segments, in holes of at most " +
           format_bytes(peak->space.largest_free) +
           "; with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True the peak could be up to that much lower.";
  if (peak->space.free_bytes * 10 >= peak->reserved_bytes)  // much free, but in large holes
    return question + "Little: at the peak " + free +
           " was free inside PyTorch's segments, in holes its cache "
           "reuses whole (the largest " +
           format_bytes(peak->space.largest_free) + "): fragmentation is not what raised the peak.";
  return question + "Little: at the peak only " + free +
         " was free inside PyTorch's segments; the peak is the tensors' own (" + format_bytes(peak->allocated_bytes) +
         " allocated).";
}

FragView frag_view(const std::vector<ProcessAnalysis>& processes) {
  FragView view;
  for (const ProcessAnalysis& p : processes) {
    FragView::Process process;
    process.id = process_id(p.report);
    process.layers_known = p.has_heaps;
    process.last_alloc_ns = p.last_alloc_ns;
    process.expandable_segments = expandable_segments_answer(p);
    for (const FragmentationPoint& f : p.fragmentation) process.points.push_back({f, advice(f)});
    for (const TimelineSeries& series : p.free_in_heaps) {
      FragView::FreeInHeaps free{series.device, {}};
      for (const TimelinePoint& point : series.points) free.points.push_back({point.t_ns, point.max_bytes});
      process.free_in_heaps.push_back(std::move(free));
    }
    view.processes.push_back(std::move(process));
  }
  return view;
}

nlohmann::json to_json(const FragView& view) {
  nlohmann::json out = {{"processes", nlohmann::json::array()}};
  for (const FragView::Process& p : view.processes) {
    nlohmann::json points = nlohmann::json::array();
    for (const FragView::Point& point : p.points) {
      const FragmentationPoint& f = point.point;
      points.push_back({{"when", f.when},
                        {"t_ns", f.t_ns},
                        {"device", f.device},
                        {"reserved_bytes", f.reserved_bytes},
                        {"allocated_bytes", f.allocated_bytes},
                        {"heap_bytes", f.space.heap_bytes},
                        {"free_bytes", f.space.free_bytes},
                        {"largest_free_bytes", f.space.largest_free},
                        {"fragmentation_index", f.space.index()},
                        {"request_bytes", f.request_bytes},
                        {"advice", point.advice}});
    }
    nlohmann::json free = nlohmann::json::array();
    for (const FragView::FreeInHeaps& f : p.free_in_heaps)
      free.push_back({{"device", f.device}, {"columns", {"t_ns", "free_bytes"}}, {"points", f.points}});
    nlohmann::json process = process_json(p.id);
    process.update({{"layers_known", p.layers_known},
                    {"points", points},
                    {"free_in_heaps", free},
                    {"last_alloc_ns", p.last_alloc_ns},
                    {"expandable_segments", p.expandable_segments}});
    out["processes"].push_back(std::move(process));
  }
  return out;
}

std::string to_text(const FragView& view) {
  std::string out;
  for (const FragView::Process& p : view.processes) {
    if (!out.empty()) out += "\n";
    out += process_heading(p.id);
    if (!p.layers_known) {
      out +=
          "  fragmentation is unknown: no allocator described its segments and blocks (NVTX memory API heaps and\n"
          "  regions, or PyTorch's allocator history); memtrace sees only what the allocation APIs reserved\n";
      continue;
    }
    out += "  " + pad("when", 6) + pad("device", 7) + pad("time", 11, true) + pad("reserved", 11, true) +
           pad("allocated", 11, true) + pad("free", 11, true) + pad("largest", 11, true) + pad("index", 7, true) + "\n";
    for (const FragView::Point& point : p.points) {
      const FragmentationPoint& f = point.point;
      char index[16];
      std::snprintf(index, sizeof index, "%.2f", f.space.index());
      out += "  " + pad(f.when, 6) + pad(std::to_string(f.device), 7) + pad(format_duration_ns(f.t_ns), 11, true) +
             pad(format_bytes(f.reserved_bytes), 11, true) + pad(format_bytes(f.allocated_bytes), 11, true) +
             pad(format_bytes(f.space.free_bytes), 11, true) + pad(format_bytes(f.space.largest_free), 11, true) +
             pad(index, 7, true) + "\n";
      if (f.when == "oom") out += "         out of memory asking for " + format_bytes(f.request_bytes) + "\n";
      if (!point.advice.empty()) out += "    " + point.advice + "\n";
    }
    for (const FragView::FreeInHeaps& f : p.free_in_heaps) {  // the allocator's cache over time
      // While the program allocates: once it only frees (at its end, Python shutting down), free
      // space asks nothing of anyone. A point is a bucket's highest: one that ends after the last
      // allocation may hold the frees after it, so only buckets that end by then count (those
      // that begin by then, where none ends by then).
      const uint64_t width = f.points.size() > 1 ? f.points[1][0] - f.points[0][0] : 0;
      const bool whole = !f.points.empty() && f.points[0][0] + width <= p.last_alloc_ns;
      uint64_t most = 0, at = 0;
      for (const auto& point : f.points)
        if (point[1] > most && point[0] + (whole ? width : 0) <= p.last_alloc_ns) {
          most = point[1];
          at = point[0];
        }
      out += "  device " + std::to_string(f.device) + ": free inside the allocator's heaps peaked at " +
             format_bytes(most) + " around " + format_duration_ns(at) + ", up to its last allocation at " +
             format_duration_ns(p.last_alloc_ns) +
             " (only what it described as its segments counts; memory reserved outside them does not)\n";
    }
    if (!p.expandable_segments.empty()) out += "  " + p.expandable_segments + "\n";
  }
  return out;
}

}  // namespace memtrace
