// memtrace's own walk of the native stack on x86-64: each frame stepped by the rule its module's
// .eh_frame gives for that instruction, kept per thread once read, so that a walk is a table
// lookup and two loads a frame. libunwind's fast trace (unw_backtrace) does the same, at ~60-95
// instructions a frame (its hash, its cursor's set-up); this one takes what a backtrace needs.
//
// Only the frames libunwind's fast trace itself handles are stepped: the canonical frame address
// from rsp or rbp plus a constant, the return address just below it, rbp unchanged or saved at a
// constant offset. Any other frame (a signal frame, code without unwind information, a rule in a
// DWARF expression) ends the walk with -1, and the caller walks with libunwind instead.
#pragma once

#include <cstdint>

namespace memtrace::inject {

// What a walk shares with the thread's walk before it: its number among the thread's walks
// (from 1), and how many of its outermost frames are the outermost frames of walk SERIAL - 1,
// both having ended with the same frame: the stack's outermost, or a WalkStop's (0: none known to be).
struct WalkTail {
  uint64_t serial = 0;
  int shared = 0;
};

// Where a walk may end before the stack does: with the COUNT-th frame whose address lies in
// [START, START + LENGTH) (under Python, the outermost call of the interpreter's evaluation loop
// that its frames began; the ones below it are the interpreter's start, or a thread's).
struct WalkStop {
  uint64_t start = 0, length = 0;
  int count = 0;
};

// Fills FRAMES with at most MAX addresses, innermost first, as unw_backtrace (libunwind 1.6) gives
// them: an address in this function first, then each caller's return address; with STOP, only up
// to its frame where the stack reaches it. Returns how many, or -1 when a frame is one it cannot
// step. TAIL, if given, is set for a walk that succeeds.
int walk_frames(void** frames, int max, WalkTail* tail = nullptr, const WalkStop* stop = nullptr);

// Modules were unloaded: the rules kept for their addresses may describe other code now.
void forget_frame_rules();

}  // namespace memtrace::inject
