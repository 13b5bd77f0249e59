#include "memtrace/engine/summary.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "memtrace/format/run_folder.h"

// std::optional as null or its value (nlohmann 3.11.2 has no serializer of its own for it).
namespace nlohmann {
template <typename T>
struct adl_serializer<std::optional<T>> {
  static void to_json(json& j, const std::optional<T>& v) {
    if (v)
      j = *v;
    else
      j = nullptr;
  }
  static void from_json(const json& j, std::optional<T>& v) {
    if (j.is_null())
      v.reset();
    else
      v = j.get<T>();
  }
};
}  // namespace nlohmann

namespace memtrace {

// Every field of what a summary keeps, by its name. A struct that gains a field fails to build
// here until the field is listed (sizes checked below) and kMagic's last byte says the layout changed.
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(Site, api, stack_id)
// Frames and the largest allocations come by the thousand (an HTML entry keeps 20,000 allocations
// and every stack at the peak): each as an array, in the order of its fields, not an object.
void to_json(nlohmann::json& j, const FrameView& f) {
  j = nlohmann::json::array({f.id, f.python, f.function, f.file, f.line, f.module, f.offset, f.address, f.inlined});
}
void from_json(const nlohmann::json& j, FrameView& f) {
  j.at(0).get_to(f.id), j.at(1).get_to(f.python), j.at(2).get_to(f.function), j.at(3).get_to(f.file);
  j.at(4).get_to(f.line), j.at(5).get_to(f.module), j.at(6).get_to(f.offset), j.at(7).get_to(f.address);
  j.at(8).get_to(f.inlined);
}
void to_json(nlohmann::json& j, const AllocationSpan& a) {
  j = nlohmann::json::array({a.start_ns, a.end_ns, a.bytes, a.addr, a.device, a.layer, a.api, a.stack_id, a.tid});
}
void from_json(const nlohmann::json& j, AllocationSpan& a) {
  j.at(0).get_to(a.start_ns), j.at(1).get_to(a.end_ns), j.at(2).get_to(a.bytes), j.at(3).get_to(a.addr);
  j.at(4).get_to(a.device), j.at(5).get_to(a.layer), j.at(6).get_to(a.api), j.at(7).get_to(a.stack_id);
  j.at(8).get_to(a.tid);
}
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(ApiCounts, calls, failed, bytes, interrupted, last_failure)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(SiteTotal, site, group, bytes, count, location, stack, named_frame,
                                                stack_flags)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(OutsideParts, pools_held, graphs_reserved, other_processes,
                                                other_processes_known, nvml_process)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(CategoryTotal, category, bytes, count)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(OwnerPart, name, bytes, count)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(OwnerShare, kind, owner, bytes, count, parts, why, tensors_bytes)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(DeviceReport, device, name, total_bytes, uuid, peak_bytes, peak_time_ns,
                                                live_at_exit_bytes, live_at_exit_count, peak_sites, exit_sites,
                                                peak_tid, peak_step, peak_phase, peak_categories, owners_at_peak,
                                                device_samples, outside_reserved_at_peak_bytes, outside_sampled_at_ns,
                                                device_used_max_sampled_bytes, outside_parts_at_peak,
                                                first_sample_bytes, first_sample_ns, first_sampled,
                                                before_recording_bytes, before_recording_count)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(OomEvent, t_ns, api, size, device, device_free_bytes,
                                                device_total_bytes, owners)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(TorchCounterCheck, figure, pytorch, memtrace)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(TorchCounters, device, when, t_ns, figures, checks, reset_seen)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(ProcessReport, pid, command, host, rank, local_rank, world_size,
                                                imported_from, joined_by, exit_status, end_reason, trace_path, complete,
                                                problem, events, dropped_events, longest_wait_ns, notices,
                                                captured_events, cupti_events, activity_records, incomplete_records,
                                                unmatched_frees, pinned_host_peak_bytes, end_time_ns, origin_unix_ns,
                                                calls, devices, oom_events, snapshots, counts, pytorch_counters)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(ShownStack, site, location, stack, named_frame, user_group)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(FreeSpace, heap_bytes, free_bytes, largest_free)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(FragmentationPoint, when, t_ns, device, reserved_bytes, allocated_bytes,
                                                space, request_bytes)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(PhaseRange, start_ns, end_ns, tid, depth, name)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(SiteGrowth, device, layer, site, group, bytes_per_step, first_step,
                                                steps_rising, intervals, bytes_at_last_boundary, location, stack,
                                                named_frame)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(TimelinePoint, t_ns, max_bytes, last_bytes)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(TimelineSeries, device, layer, points)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(ProcessAnalysis, report, allocated, has_allocated, pytorch,
                                                categories_known, step_starts, first_change_ns, last_change_ns,
                                                last_alloc_ns, expandable_segments, step_pattern, ranges,
                                                ranges_dropped, step_boundaries, growth, reserved_growth, has_heaps,
                                                fragmentation, timeline, free_in_heaps, device_used,
                                                last_device_sample_ns, timeline_bucket_ns, largest, allocations_seen,
                                                stacks)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(AnalysisOptions, top_sites, grouping, keep_cuda_frames, step_pattern,
                                                timeline, fragmentation, categories, owners, labels,
                                                largest_allocations)

namespace {

// The sizes of the structs listed above as they were when their fields were listed (x86-64,
// libstdc++): a new field changes a size and stops the build here. Not kept, on purpose:
// ProcessAnalysis::owner_timeline (a summary does not serve timeline --by owner).
static_assert(sizeof(FrameView) == 144 && sizeof(SiteTotal) == 112 && sizeof(DeviceReport) == 368 &&
                  sizeof(ProcessReport) == 568 && sizeof(ProcessAnalysis) == 1544 && sizeof(SiteGrowth) == 136 &&
                  sizeof(AnalysisOptions) == 72 && sizeof(TorchCounters) == 128 && sizeof(OomEvent) == 72 &&
                  sizeof(FragmentationPoint) == 96 && sizeof(AllocationSpan) == 56 && sizeof(ShownStack) == 88,
              "a field was added to what a summary keeps: list it in summary.cpp and raise the version in kMagic");

// "MEMSUM", 0 and the layout's version; then each entry in three parts, each after its size (8
// bytes, little-endian): its options as JSON; its analysis but the timeline, and the timeline's
// fields, each as MessagePack compressed with zstd. A command unpacks only the entry it reads, and
// its timeline only when it draws one.
constexpr char kMagic[8] = {'M', 'E', 'M', 'S', 'U', 'M', '\0', '\5'};

void append_sized(std::string& out, std::string_view part) {
  uint64_t size = part.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(size >> (8 * i)));
  out.append(part);
}

// The fields only the timeline needs: a part of their own, unpacked only when asked for.
constexpr const char* kTimelineFields[] = {"timeline", "free_in_heaps", "device_used", "last_device_sample_ns",
                                           "timeline_bucket_ns"};

bool pack(const std::vector<uint8_t>& in, std::string& out, std::string& error) {
  out.resize(ZSTD_compressBound(in.size()));
  size_t n = ZSTD_compress(out.data(), out.size(), in.data(), in.size(), 9);
  if (ZSTD_isError(n)) {
    error = std::string("cannot compress a summary: ") + ZSTD_getErrorName(n);
    return false;
  }
  out.resize(n);
  return true;
}

// What one summary can make a reader hold (summaries are copied between machines, and a few
// kilobytes of zstd unpack to gigabytes): a part unpacks to at most kMaxPartBytes, and holds at
// most kMaxPartValues values (each becomes a JSON value of 16 bytes and more). An HTML entry of
// 20,000 allocations with their stacks holds about a million.
constexpr uint64_t kMaxPartBytes = 256ull << 20;
constexpr size_t kMaxPartValues = size_t{1} << 23;
constexpr size_t kMaxPartDepth = 64;

// Counts a MessagePack document's values without building them; stops past the bounds above.
struct ValueCounter {
  using json = nlohmann::json;
  size_t values = 0, depth = 0;
  bool over = false;
  bool value() { return !(over = over || ++values > kMaxPartValues); }
  bool null() { return value(); }
  bool boolean(bool) { return value(); }
  bool number_integer(json::number_integer_t) { return value(); }
  bool number_unsigned(json::number_unsigned_t) { return value(); }
  bool number_float(json::number_float_t, const json::string_t&) { return value(); }
  bool string(json::string_t&) { return value(); }
  bool binary(json::binary_t&) { return value(); }
  bool key(json::string_t&) { return value(); }
  bool start_object(size_t) { return value() && !(over = ++depth > kMaxPartDepth); }
  bool start_array(size_t) { return start_object(0); }
  bool end_object() { return --depth, true; }
  bool end_array() { return end_object(); }
  bool parse_error(size_t, const std::string&, const nlohmann::detail::exception&) { return false; }
};

// The document in BYTES, or false (OVER_BOUNDS: it holds more than a summary may) when it cannot be.
bool parse_part(const std::vector<uint8_t>& bytes, nlohmann::json& out, bool& over_bounds) {
  ValueCounter counter;
  if (!nlohmann::json::sax_parse(bytes, &counter, nlohmann::json::input_format_t::msgpack)) {
    over_bounds = counter.over;
    return false;
  }
  out = nlohmann::json::from_msgpack(bytes);
  return true;
}

bool unpack(std::string_view packed, std::vector<uint8_t>& out, bool& over_bounds) {
  unsigned long long size = ZSTD_getFrameContentSize(packed.data(), packed.size());
  if (size == ZSTD_CONTENTSIZE_ERROR || size == ZSTD_CONTENTSIZE_UNKNOWN) return false;
  if ((over_bounds = size > kMaxPartBytes)) return false;
  out.resize(size);
  size_t n = ZSTD_decompress(out.data(), out.size(), packed.data(), packed.size());
  return !ZSTD_isError(n) && n == size;
}

bool take_sized(std::string_view& in, std::string_view& part) {
  if (in.size() < 8) return false;
  uint64_t size = 0;
  for (int i = 0; i < 8; ++i) size |= uint64_t(static_cast<unsigned char>(in[i])) << (8 * i);
  in.remove_prefix(8);
  if (size > in.size()) return false;
  part = in.substr(0, size);
  in.remove_prefix(size);
  return true;
}

bool same_sites(const AnalysisOptions& a, const AnalysisOptions& b) {
  return a.top_sites == b.top_sites && a.grouping == b.grouping && a.keep_cuda_frames == b.keep_cuda_frames &&
         a.labels.value_or(a.grouping) == b.labels.value_or(b.grouping);
}

std::string grouping_name(SiteGrouping g) {
  switch (g) {
    case SiteGrouping::kPython: return "python";
    case SiteGrouping::kNative: return "native";
    case SiteGrouping::kStack: return "stack";
    case SiteGrouping::kApi: return "api";
    case SiteGrouping::kOwner: return "owner";
    case SiteGrouping::kUser: break;
  }
  return "user";
}

std::string describe(const AnalysisOptions& o) {
  if (o.largest_allocations) return "the HTML page";
  std::string text = "--by " + grouping_name(o.grouping) + " --top " + std::to_string(o.top_sites);
  if (o.keep_cuda_frames) text += " --keep-cuda-frames";
  if (o.step_pattern != kDefaultStepPattern) text += " --step '" + o.step_pattern + "'";
  return text;
}

// Leaves out what an analysis under WANTED would not have made.
void trim_to(const AnalysisOptions& wanted, ProcessAnalysis& a) {
  if (!wanted.timeline) {
    a.timeline.clear();
    a.free_in_heaps.clear();
    a.device_used.clear();
    a.last_device_sample_ns = 0;
    a.timeline_bucket_ns = 0;
  }
  if (!wanted.fragmentation) {
    a.fragmentation.clear();
    a.free_in_heaps.clear();
    a.has_heaps = false;
  }
  if (!wanted.categories) {
    for (DeviceReport& d : a.allocated.devices) d.peak_categories.clear();
  }
  if (!wanted.owners) {
    for (DeviceReport& d : a.report.devices) d.owners_at_peak.clear();
    for (OomEvent& o : a.report.oom_events) o.owners.clear();
  }
  if (!wanted.largest_allocations) {
    a.largest.clear();
    a.allocations_seen = 0;
    a.stacks.clear();
  }
}

// A summary is a regular file of at most this size (a real one is kilobytes to megabytes); its
// options are JSON of at most kMaxOptionsBytes.
constexpr uint64_t kMaxSummaryBytes = 1ull << 30;
constexpr size_t kMaxOptionsBytes = 64 << 10;

bool read_file(const std::string& path, std::string& bytes, std::string& error) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // a FIFO planted there does not hold us
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0) {
    error = "cannot read " + path + ": " + std::strerror(errno);
    if (fd >= 0) ::close(fd);
    return false;
  }
  if (!S_ISREG(st.st_mode) || uint64_t(st.st_size) > kMaxSummaryBytes) {
    error = path + (S_ISREG(st.st_mode) ? " is larger than the 1 GiB a summary may be" : " is not a file");
    ::close(fd);
    return false;
  }
  bytes.resize(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  bytes.resize(done);
  ::close(fd);
  return true;
}

}  // namespace

bool is_summary_header(std::string_view head) { return head.size() >= 6 && std::memcmp(head.data(), kMagic, 6) == 0; }

std::string summary_path_of(const std::string& trace_path) {
  std::string path = trace_path;
  if (path.size() >= run_folder::kTraceExtension.size() &&
      path.compare(path.size() - run_folder::kTraceExtension.size(), std::string::npos, run_folder::kTraceExtension) ==
          0)
    path.resize(path.size() - run_folder::kTraceExtension.size());
  return path + std::string(run_folder::kSummaryExtension);
}

std::string trace_path_of(const std::string& summary_path) {
  std::string path = summary_path;
  if (path.size() >= run_folder::kSummaryExtension.size() &&
      path.compare(path.size() - run_folder::kSummaryExtension.size(), std::string::npos,
                   run_folder::kSummaryExtension) == 0)
    path.resize(path.size() - run_folder::kSummaryExtension.size());
  return path + std::string(run_folder::kTraceExtension);
}

bool write_summary(const std::string& path, const std::vector<SummaryEntry>& entries, std::string& error, mode_t mode) {
  std::string bytes(kMagic, sizeof kMagic);
  for (const SummaryEntry& e : entries) {
    nlohmann::json analysis = e.analysis, timeline = nlohmann::json::object();
    for (const char* key : kTimelineFields) {
      timeline[key] = std::move(analysis[key]);
      analysis.erase(key);
    }
    std::string packed_analysis, packed_timeline;
    if (!pack(nlohmann::json::to_msgpack(analysis), packed_analysis, error) ||
        !pack(nlohmann::json::to_msgpack(timeline), packed_timeline, error))
      return false;
    append_sized(bytes, nlohmann::json(e.options).dump());
    append_sized(bytes, packed_analysis);
    append_sized(bytes, packed_timeline);
  }
  // Beside it, then renamed over it: a summary read while another is written is whole.
  std::string temporary = path + ".tmp-XXXXXX";
  int fd = ::mkstemp(temporary.data());  // O_EXCL, 0600: nothing followed, nobody else reads it meanwhile
  bool ok = fd >= 0;
  for (size_t done = 0; ok && done < bytes.size();) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += static_cast<size_t>(n);
  }
  if (fd >= 0) {
    ok = ::fchmod(fd, mode & 0666) == 0 && ok;
    ok = ::close(fd) == 0 && ok;
  }
  ok = ok && ::rename(temporary.c_str(), path.c_str()) == 0;
  if (!ok) {
    error = "cannot write " + path + ": " + std::strerror(errno);
    if (fd >= 0) ::unlink(temporary.c_str());
  }
  return ok;
}

bool read_summary(const std::string& path, const AnalysisOptions& wanted, ProcessAnalysis& out, std::string& error) {
  std::string bytes;
  if (!read_file(path, bytes, error)) return false;
  if (bytes.size() < sizeof kMagic || !is_summary_header(bytes)) {
    error = path + " is not a memtrace summary";
    return false;
  }
  if (bytes[7] != kMagic[7]) {
    error = path + " is a summary of another memtrace's layout (" + std::to_string(int(bytes[7])) +
            "; this one reads " + std::to_string(int(kMagic[7])) + "): make it again with this memtrace's summarize";
    return false;
  }
  const std::string damaged = path + " is a damaged summary";
  std::vector<std::string> made_with;
  std::string_view rest = std::string_view(bytes).substr(sizeof kMagic);
  try {
    while (!rest.empty()) {
      std::string_view options_text, packed_analysis, packed_timeline;
      if (!take_sized(rest, options_text) || !take_sized(rest, packed_analysis) || !take_sized(rest, packed_timeline) ||
          options_text.size() > kMaxOptionsBytes) {
        error = damaged;
        return false;
      }
      AnalysisOptions options = nlohmann::json::parse(options_text).get<AnalysisOptions>();
      made_with.push_back(describe(options));
      const bool serves = same_sites(options, wanted) && options.step_pattern == wanted.step_pattern &&
                          (options.timeline || !wanted.timeline) && (options.fragmentation || !wanted.fragmentation) &&
                          (options.categories || !wanted.categories) && (options.owners || !wanted.owners) &&
                          // Owners over time (timeline --by owner) are not kept: the trace is read.
                          !(wanted.grouping == SiteGrouping::kOwner && wanted.timeline) &&
                          (!wanted.largest_allocations || options.largest_allocations == wanted.largest_allocations);
      if (!serves) continue;
      std::vector<uint8_t> analysis_bytes, timeline_bytes;
      nlohmann::json analysis, timeline;
      bool over_bounds = false;
      if (!unpack(packed_analysis, analysis_bytes, over_bounds) ||
          (wanted.timeline && !unpack(packed_timeline, timeline_bytes, over_bounds)) ||
          !parse_part(analysis_bytes, analysis, over_bounds) ||
          (wanted.timeline && !parse_part(timeline_bytes, timeline, over_bounds))) {
        error = over_bounds ? damaged + " (it holds more than the " + std::to_string(kMaxPartBytes >> 20) + " MiB, " +
                                  std::to_string(kMaxPartValues) + " values or " + std::to_string(kMaxPartDepth) +
                                  " levels of nesting a summary may hold): make it again with memtrace summarize"
                            : damaged;
        return false;
      }
      if (wanted.timeline) analysis.update(timeline);
      out = analysis.get<ProcessAnalysis>();
      trim_to(wanted, out);
      out.report.trace_path = trace_path_of(path);
      return true;
    }
  } catch (const nlohmann::json::exception& e) {
    error = damaged + " (" + e.what() + ")";
    return false;
  }
  std::string had;
  for (const std::string& m : made_with) had += (had.empty() ? "" : " and for ") + m;
  error = path + " is a summary made for " + (had.empty() ? "nothing" : had) + ", not for " + describe(wanted) +
          ": make one with memtrace summarize " +
          (wanted.largest_allocations ? "--html --largest " + std::to_string(wanted.largest_allocations)
                                      : describe(wanted)) +
          ", or read the traces themselves";
  return false;
}

bool summarize_trace(const std::string& trace_path, const std::vector<AnalysisOptions>& options, size_t& bytes,
                     std::string& error) {
  struct stat trace {};
  if (::stat(trace_path.c_str(), &trace) != 0) {
    error = "cannot read " + trace_path + ": " + std::strerror(errno);
    return false;
  }
  std::vector<SummaryEntry> entries(options.size());
  for (size_t i = 0; i < options.size(); ++i) {
    entries[i].options = options[i];
    if (!analyze_process(trace_path, options[i], entries[i].analysis, error)) return false;
  }
  const std::string path = summary_path_of(trace_path);
  if (!write_summary(path, entries, error, trace.st_mode)) return false;
  struct stat st {};
  bytes = ::stat(path.c_str(), &st) == 0 ? static_cast<size_t>(st.st_size) : 0;
  return true;
}

}  // namespace memtrace
