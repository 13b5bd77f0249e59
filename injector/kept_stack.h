// The stack this thread last sent the collector (ring::kStackKept), kept so that its next one
// sends only the frames that differ: a loop allocating from one place sends its innermost frames,
// or none, not the forty that lead to it (ring::EventRecord::native_reused).
#pragma once

#include <cstdint>

#include "memtrace/ring/protocol.h"
#include "stack_capture.h"

namespace memtrace::inject {

struct KeptStack {
  uint64_t session;      // the session it was sent in; 0: none
  uint64_t index;        // the ring slot of its record
  uint64_t walk_serial;  // StackCapture::walk_serial
  uint16_t native_count, python_count;
  bool publishing;  // this thread is sending an event: one a signal handler sends meanwhile keeps nothing
  // Its frames, innermost first, ending at each array's end.
  uint64_t native[kMaxNativeFrames];
  uint64_t python[2 * kMaxPythonFrames];  // (code, instruction) pairs
};

// This thread's, zero-filled at first (a thread block); null when it cannot be mapped.
KeptStack* kept_stack();

// How many of STACK's outermost frames are KEPT's outermost ones.
struct SharedFrames {
  int native = 0, python = 0;
};
SharedFrames shared_frames(const KeptStack& kept, const StackCapture& stack);

// An event record's stack: REC's frame counts, and into WORDS the frames it sends, STACK's but
// the outermost REUSED of the kept stack (native frames, then Python pairs). The words written.
size_t stack_payload(const StackCapture& stack, SharedFrames reused, ring::EventRecord& rec, uint64_t* words);

// STACK, which shares SHARED with KEPT, was sent in session SESSION as the record at ring slot
// INDEX: it is the kept one now (only the frames it does not share are written).
void keep_stack(KeptStack& kept, const StackCapture& stack, SharedFrames shared, uint64_t session, uint64_t index);

}  // namespace memtrace::inject
