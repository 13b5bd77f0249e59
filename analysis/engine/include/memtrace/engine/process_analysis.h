// One streaming pass over one process's trace that feeds every analysis: the report (calls,
// peaks, sites) of the reserved layer and, when the trace has one, of the allocated layer;
// phases and steps; growth per step; fragmentation; the timeline. Memory grows with the live
// set and the number of sites, not with the trace's length.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "memtrace/engine/fragmentation.h"
#include "memtrace/engine/growth.h"
#include "memtrace/engine/largest_allocations.h"
#include "memtrace/engine/phases.h"
#include "memtrace/engine/report.h"
#include "memtrace/engine/timeline.h"

namespace memtrace {

struct AnalysisOptions {
  size_t top_sites = 10;
  SiteGrouping grouping = SiteGrouping::kUser;
  bool keep_cuda_frames = false;
  std::string step_pattern = kDefaultStepPattern;  // ECMAScript, matching a whole name
  bool timeline = false;
  // The free space inside the allocators' heaps (fragmentation, has_heaps, free_in_heaps): frag,
  // diff and the HTML page read it; peak, leaks, report, check and timeline leave it out, a third
  // of the replay of a PyTorch snapshot.
  bool fragmentation = true;
  // What PyTorch's tensors live at each peak of the allocated layer were for (peak_categories;
  // categories_known is found either way): peak (--layer allocated, --by category), explain and
  // summaries read it; leaks, report, check, frag, timeline, diff and the HTML page leave it out,
  // a quarter of the replay of a PyTorch snapshot.
  bool categories = true;
  // Who held each device at its reserved peak (DeviceReport::owners_at_peak): peak --by owner,
  // report, diff and the HTML page read it.
  bool owners = false;
  // How sites are named, when not as they are grouped (sites by stack, named by the user's frame).
  std::optional<SiteGrouping> labels;
  // Keep this many of the largest allocations with their lifetimes and stacks (the HTML report).
  size_t largest_allocations = 0;
};

// A stack as shown, and the site it belongs to (filled in by resolve_site).
struct ShownStack {
  Site site;
  std::string location;          // the site's name
  std::vector<FrameView> stack;  // innermost first
  size_t named_frame = 0;
  uint64_t user_group = 0;  // the site it belongs to under --by user (StackView::site_key)
};

// Free space inside the heaps at a moment that matters: a device's peak of reserved memory, or
// an allocation that failed for lack of memory.
struct FragmentationPoint {
  std::string when;  // "peak" or "oom"
  uint64_t t_ns = 0;
  int32_t device = -1;
  uint64_t reserved_bytes = 0;
  uint64_t allocated_bytes = 0;
  FreeSpace space;
  uint64_t request_bytes = 0;  // oom: what was asked for
};

struct ProcessAnalysis {
  ProcessReport report;     // the reserved layer, with calls, endings and snapshots
  ProcessReport allocated;  // the allocated layer's devices, peaks and sites (when has_allocated)
  bool has_allocated = false;
  bool pytorch = false;           // PyTorch's caching allocator described the allocated layer
  bool categories_known = false;  // the allocated layer's devices carry peak_categories
  std::vector<uint64_t> step_starts;
  uint64_t first_change_ns = 0, last_change_ns = 0;  // when memory first and last changed (no change: 0, 0)
  uint64_t last_alloc_ns = 0;        // the last allocation that succeeded: after it, the program only frees
  bool expandable_segments = false;  // PyTorch grew segments by mapping (expandable_segments:True)
  std::string step_pattern;
  std::vector<PhaseRange> ranges;
  uint64_t ranges_dropped = 0;
  uint64_t step_boundaries = 0;
  // Sites growing step by step, largest first: of PyTorch's tensors when the trace has them (its
  // caching allocator grows its reserved segments by design), else of both layers.
  std::vector<SiteGrowth> growth;
  std::vector<SiteGrowth> reserved_growth;  // with PyTorch's tensors: the reserved layer's
  bool has_heaps = false;
  std::vector<FragmentationPoint> fragmentation;
  std::vector<TimelineSeries> timeline;
  // Per device, the bytes free inside the allocator's heaps over time (what it described as its
  // segments, less the blocks it handed out); memory reserved outside any heap is not in it.
  std::vector<TimelineSeries> free_in_heaps;
  // Per device, what the device had in use by the device layer's samples (cudaMemGetInfo).
  std::vector<TimelineSeries> device_used;
  uint64_t last_device_sample_ns = 0;  // the device layer is known up to its last sample, not after
  uint64_t timeline_bucket_ns = 0;
  // With options.owners, options.timeline and sites by owner (timeline --by owner): each owner's
  // reserved bytes over time, per device.
  std::vector<OwnerSeries> owner_timeline;
  // With options.largest_allocations: those allocations, of both layers, how many there were in
  // all, and the stacks they name, by stack id.
  std::vector<AllocationSpan> largest;
  uint64_t allocations_seen = 0;
  std::map<uint64_t, ShownStack> stacks;
};

// Reads the trace at PATH in one pass. False with ERROR set when it is not a readable trace; a
// cut or damaged one gives what was read, with report.complete false and report.problem why.
bool analyze_process(const std::string& path, const AnalysisOptions& options, ProcessAnalysis& out, std::string& error);

}  // namespace memtrace
