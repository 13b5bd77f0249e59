// The environment `memtrace run` hands every traced process, read by the injector: one name for
// each setting, so the two sides cannot drift apart.
#pragma once

namespace memtrace::env {

inline constexpr const char* kSocket = "MEMTRACE_SOCKET";               // the collector's control socket
inline constexpr const char* kMaxStallMs = "MEMTRACE_MAX_STALL_MS";     // --max-stall, in ms
inline constexpr const char* kStackDepth = "MEMTRACE_STACK_DEPTH";      // --stack-depth
inline constexpr const char* kNativeStacks = "MEMTRACE_NATIVE_STACKS";  // "0": --no-native-stacks
inline constexpr const char* kPythonStacks = "MEMTRACE_PYTHON_STACKS";  // "0": --no-python-stacks
inline constexpr const char* kRingBytes = "MEMTRACE_RING_BYTES";        // the ring's size (a power of two)
inline constexpr const char* kBackend = "MEMTRACE_BACKEND";             // --backend: auto, preload or cupti
inline constexpr const char* kVerify = "MEMTRACE_VERIFY";               // "1": --verify
inline constexpr const char* kCuptiLibrary = "MEMTRACE_CUPTI_LIBRARY";  // which libcupti to load
// How far apart (µs, default 1000) the device layer is sampled per device; 0: after every allocation.
inline constexpr const char* kSampleIntervalUs = "MEMTRACE_SAMPLE_INTERVAL_US";
inline constexpr const char* kNvml = "MEMTRACE_NVML";  // "0": never load NVML into the program
// "0": never read the interpreter's own structures, only the C API (threads holding the GIL).
inline constexpr const char* kPythonLayout = "MEMTRACE_PYTHON_LAYOUT";
// "libunwind": walk native stacks with libunwind alone, not memtrace's own walk (to compare them).
inline constexpr const char* kFrameWalk = "MEMTRACE_FRAME_WALK";
// The run's output folder: where the Python shim writes what PyTorch's own recorder kept, for the
// collector to merge into the process's trace (analysis/torch_history.cpp).
inline constexpr const char* kOutputDir = "MEMTRACE_OUTPUT_DIR";
// The traces' mode, in octal ("600"): the Python shim's files there have it (0600 when not given).
inline constexpr const char* kFileMode = "MEMTRACE_FILE_MODE";
// Read by memtrace run itself: a library to preload before the injector (a sanitizer's runtime),
// and where its injector, simulated device and Python shim are (default: ../lib beside it).
inline constexpr const char* kPreloadFirst = "MEMTRACE_PRELOAD_FIRST";
inline constexpr const char* kLibDir = "MEMTRACE_LIB_DIR";
// "1": loaded by memtrace.record, which starts the Python shim itself
inline constexpr const char* kInProcess = "MEMTRACE_IN_PROCESS";

}  // namespace memtrace::env
