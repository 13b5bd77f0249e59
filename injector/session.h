// The injector's link to the collector: connects lazily on the first recorded call, owns the
// ring, and becomes a pass-through whenever there is no collector to talk to.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "memtrace/format/event.h"
#include "stack_capture.h"

namespace memtrace::inject {

// True when this process records events (connecting to the collector on first use).
bool session_active();
// Ends the session for good (memtrace.stop): nothing more is published, and the collector sees the
// connection close. The ring stays mapped: another thread may be writing its last record.
void end_session();

// Starts a session now, on this thread: one that never started, or one that ended (memtrace.stop,
// memtrace detach), then with a new ring and connection (memtrace attach, again). False when one is
// recording or starting, or the collector cannot be reached.
bool begin_session();
// Counts the sessions started in this process image (1 for the first).
uint64_t session_number();
// Whether a session is recording now (never connects).
bool session_recording();

// Takes EVENT's place in the causal order: its time (CLOCK_MONOTONIC) and thread; returns its
// sequence number.
uint64_t stamp(Event& event);

// The recorded call this thread is inside, for a process killed inside it (ring::RingHeader::InCall):
// the thread enters a call of API, the call takes its place in the order (SEQ, at T_NS: stamp),
// and the thread leaves it once the call's record was delivered or counted as dropped. A thread
// the in-call table has no room for publishes a ring::StartedRecord as it enters instead.
void enter_call(Api api, uint64_t caller);
void call_ordered(uint64_t seq, uint64_t t_ns);
void leave_call();

// Hands a stamped event (sequence number SEQ), its stack if it has one, and its name (NVTX marks)
// to the collector. Waits a bounded time if the ring is full; counts the event as dropped if it
// cannot be delivered.
void publish(const Event& event, uint64_t seq, const StackCapture* stack, std::string_view name = {});

// Records a mark, a range edge, a category or a counter from the Python shim (a step, a phase,
// what the tensor at ADDR is, PyTorch's counter of DEVICE with its value in SIZE). Only when the
// process is traced already: it never connects to the collector, so a program that never uses
// CUDA still leaves no trace.
void record_shim_mark(Api api, uint64_t addr, std::string_view name, int32_t device = 0, uint64_t size = 0);

// Tells PyTorch's trace tracker the memory this thread just reserved (torch_tracker.cpp): the
// first segment PyTorch reports must be it.
void note_reserved(uint64_t addr, uint64_t size);
// A segment PyTorch's allocator held when recording started (its own snapshot said): blocks
// handed out inside it confirm that the tracker's events are read right (torch_tracker.cpp).
void note_segment_before_recording(uint64_t addr, uint64_t size);
// Drops the tracker's events held until it could check it reads them right (a session ended).
void forget_early_torch_events();

// Describes a Python code object (python_stack.cpp) and the loaded modules (modules.cpp).
// A Python code object under id ID: its (qualified) name, file, first line, and line table
// (python::LineTable TABLE_FORMAT).
void publish_code(uint64_t id, std::string_view name, std::string_view file, int32_t first_line, uint8_t table_format,
                  std::string_view table);
// One sentence for the trace: something about this process's recording the user should know.
void publish_notice(std::string_view text);
void publish_module(uint64_t bias, uint64_t start, uint64_t end, std::string_view path);

// Free and total bytes of the current context's device, right after an allocation failed for
// lack of memory; false when the driver cannot say (device_query.cpp).
bool query_device_memory(uint64_t caller, uint64_t& free_bytes, uint64_t& total_bytes);

// Samples the memory in use on DEVICE (the device layer) after an allocation of BYTES there, at
// most once a millisecond per device unless it is a large one, when DEVICE is the current
// context's (cuMemGetInfo asks about that one) (device_query.cpp). NOW_NS: the time now
// (CLOCK_MONOTONIC), by default read here; an allocation passes its event's, read already.
void sample_device_memory(uint64_t caller, int device, uint64_t bytes, uint64_t now_ns = 0);

// What NVML says of this process on the device with UUID: the bytes it has in use there (nvml.cpp).
enum class NvmlAnswer { kAbsent, kNotListed, kListed };  // no NVML to ask, or it cannot say; not listed; listed
NvmlAnswer nvml_process_memory(const unsigned char (&uuid)[16], uint64_t& used);

// The devices the process sees, as ring::DeviceEntry records followed by their names; false
// when the driver cannot say yet (device_query.cpp).
bool query_devices(uint64_t caller, std::string& payload, uint32_t& count);

// Tells the collector the devices' names, sizes and UUIDs, once per session, after a call
// succeeded (the driver is initialized by then).
void describe_devices_once(uint64_t caller);

// How stacks are taken in this process (from memtrace run's options).
const StackOptions& stack_options();

// Tells the collector about every module loaded now that it has not heard of (modules.cpp);
// ensure_... does so only when one of ADDRESSES lies outside the modules already reported.
void report_new_modules();
void ensure_modules_reported(const uint64_t* addresses, int count);
void forget_reported_modules();

}  // namespace memtrace::inject
