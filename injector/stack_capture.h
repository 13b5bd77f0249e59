// The call stack of an allocation, taken inside the traced process: native return addresses
// (memtrace's own walk, frame_walk.h, with libunwind for the frames it leaves) and its Python
// frames. Symbolizing is left to the collector.
#pragma once

#include <cstdint>

namespace memtrace::inject {

inline constexpr int kMaxNativeFrames = 256;
inline constexpr int kMaxPythonFrames = 128;

struct StackCapture {
  uint16_t native_count = 0;
  uint16_t python_count = 0;
  uint8_t python_state = 0;  // ring::PythonState
  bool truncated = false;
  // The native frames are all of walk WALK_SERIAL below memtrace's own (frame_walk.h; 0: not
  // so), and their outermost WALK_SHARED those of the thread's walk before it. Only for a stack
  // published by the thread that took it, before it takes another (kept_stack.h).
  uint64_t walk_serial = 0;
  uint16_t walk_shared = 0;
  uint64_t native[kMaxNativeFrames];
  uint64_t python[2 * kMaxPythonFrames];  // (code object, line) pairs
};

struct StackOptions {
  int depth = 64;  // native frames at most
  bool native = true;
  bool python = true;
  // Python frames may be read through the C API (PyEval_GetFrame, ...) when the thread holds the
  // GIL. Not inside PyTorch's allocator lock: those calls allocate (3.9, 3.10: frame objects; 3.11:
  // GC-tracked ones, and a collection can run finalizers that free tensors into the same allocator).
  bool python_api = true;
};

// Fills STACK for the current thread. CALLER is the return address into the program, the
// stack's innermost frame when native stacks are off.
void capture_stack(const StackOptions& options, uint64_t caller, StackCapture& stack);

// Where the interpreter's evaluation loop (_PyEval_EvalFrameDefault: START to END) stands on the
// native stack: COUNT of its frames, one for each call of it that the thread's Python frames began.
struct EvalLoops {
  int count = 0;  // 0: not known
  uint64_t start = 0, end = 0;
};

// Python frames of the current thread (python_state and python[]); describes each code object
// to the collector the first time it appears; sets LOOPS where it can tell them. Defined in
// python_stack.cpp.
void capture_python(int max_frames, bool allow_api, StackCapture& stack, EvalLoops* loops = nullptr);
// Whether Python frames are read from the interpreter's memory (no C API: no native frames needed
// to decide whether it may be called).
bool python_read_directly();
// The collector of a forked child has seen none of the parent's code objects.
void forget_described_code();

// Loads libunwind where the settings ask for native stacks and it is not loaded yet: at load time,
// or, in a process memtrace attach joined, from attach's own thread.
void prepare_native_stacks();
// Modules were loaded: Python may be among them now.
void look_for_python_again();

// Whether one of the native frames (COUNT of them) lies in PyTorch's allocator (libc10_cuda): the
// thread holds its lock there (torch_tracker.cpp).
bool inside_pytorch_allocator(const uint64_t* frames, int count);

// Whether ADDRESS lies in this library: frames of memtrace itself are not part of a stack.
bool in_injector(uint64_t address);

}  // namespace memtrace::inject
