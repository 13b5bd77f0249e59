// `memtrace report` as text for the terminal and as JSON for scripts.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "memtrace/engine/report.h"

namespace memtrace {

// The JSON contract of `memtrace report --json` (fields are added, never removed or renamed).
nlohmann::json report_json(const std::vector<ProcessReport>& processes);
std::string report_text(const std::vector<ProcessReport>& processes);
// A stack as JSON: [{"kind","function","file","line","module",...}], innermost first.
nlohmann::json stack_json(const std::vector<FrameView>& frames);
// A stack as text views print it: a line per frame from FIRST outwards (Python and native, each as
// frame_label names it), INDENT spaces in, at most MAX_FRAMES, without the C runtime's start-up
// nor, once a Python frame has come, the interpreter's own frames.
std::string stack_text(const std::vector<FrameView>& frames, size_t first, size_t indent, size_t max_frames);
// A site: {"api","bytes","count","location","stack"}, and what its stack is missing, if anything.
nlohmann::json site_json(const SiteTotal& site);
std::string command_line(const std::vector<std::string>& command);
// The device layer of DEVICE in one line: what it used at most, and how much of that lay outside
// the reserved layer (JOINED: recording began while the process ran, and what it held before lies
// outside too).
std::string device_layer_line(const DeviceReport& d, bool joined = false);
// PyTorch's own counters beside memtrace's: as JSON, and as text lines INDENT spaces in (the
// figures of LAYER: reserved, allocated, or all of them for kUnknown). RESERVED_PEAK, the reserved
// layer's peak on that device where the text stands beside it, is set against PyTorch's segments.
nlohmann::json torch_counters_json(const TorchCounters& counters);
std::string torch_counters_text(const TorchCounters& counters, size_t indent, Layer layer = Layer::kUnknown,
                                std::optional<uint64_t> reserved_peak = std::nullopt);
// What the allocated layer counts when PyTorch described it, in one sentence.
inline constexpr const char* kPyTorchAllocatedLayer =
    "allocated: the bytes tensors asked for (PyTorch's requested_bytes, as its memory_viz draws tensors); its "
    "blocks, rounded up from them, are allocated_bytes";
// "12.5%" of WHOLE; and S padded with spaces to WIDTH, on the left when RIGHT (for numbers).
std::string percent(uint64_t part, uint64_t whole);
std::string pad(std::string s, size_t width, bool right = false);
// The width of a column of API names.
inline constexpr size_t kApiColumn = kLongestApiName + 2;
// Text made safe inside XML and SVG, attributes included.
std::string escape_xml(const std::string& s);
// Which process a part of a view is about, and its heading: "process PID: COMMAND", "rank R
// (process PID on HOST): COMMAND" in a distributed job, "PyTorch memory snapshot PATH".
struct ProcessId {
  int32_t pid = 0;
  std::vector<std::string> command;
  std::string trace;
  std::string host;
  std::optional<int32_t> rank, local_rank, world_size;
  std::string imported_from;
  std::string joined_by;  // recorded from the middle of its run: "memtrace attach", "memtrace.record"
};
ProcessId process_id(const ProcessReport& report);
std::string process_heading(const ProcessId& process);
// What is live when the trace ends: "exit", or "the end of recording" for a process recorded from
// the middle of its run.
std::string trace_end_words(const ProcessId& process);
// The same, short, to name a chart's series: "pid PID", "rank R", "snapshot FILE".
std::string process_label(const ProcessId& process);
// The parts of a JSON document that say which process, and which device, it is about:
// {"pid","command","trace","host","rank","local_rank","world_size","imported_from"} and
// {"device","name","uuid","total_bytes"}.
nlohmann::json process_json(const ProcessId& process);
nlohmann::json device_json(const DeviceReport& device);
// Who held the device at its reserved peak (DeviceReport::owners_at_peak): the rows, their sum,
// and what they add up to.
uint64_t owners_total(const DeviceReport& device);
nlohmann::json owners_json(const DeviceReport& device);
std::string owners_text(const DeviceReport& device, int indent);
// ROWS (at a peak, at an out-of-memory) against WHOLE, what they add up to, said by IN_ALL.
std::string owners_text(const std::vector<OwnerShare>& rows, uint64_t whole, const std::string& in_all, int indent);
nlohmann::json owner_rows_json(const std::vector<OwnerShare>& rows, uint64_t whole);

}  // namespace memtrace
