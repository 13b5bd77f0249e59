// The protocol between the injector (inside each traced process) and the collector: a
// shared-memory ring of fixed-size slots, handed over once through the control socket.
//
// The ring lives in a memfd the traced process creates. Both sides map its data region twice,
// back to back, so a record that runs past the end is still contiguous in memory. Producers
// (any thread of the traced process) reserve slots with a CAS on `head`, fill them, and publish
// the first slot's `state` last, with release order. The one consumer (the collector) reads
// published records at `tail`, clears their slots, then advances `tail`.
//
// Because the memfd outlives the process, a process killed at any moment leaves every published
// record readable. A record whose writer died before publishing shows an unpublished slot; once
// the process is gone the consumer steps over such slots one at a time.
//
// Ordering: each event takes a sequence number from `next_seq` at the moment that orders it (a
// free before the real call, an allocation after it returns), so the collector can put events
// back in causal order even though threads publish them in any order.
#pragma once

#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "memtrace/format/event.h"

namespace memtrace::ring {

inline constexpr uint64_t kMagic = 0x31474e495254454dull;  // "METRING1"
inline constexpr uint32_t kVersion = 6;
inline constexpr size_t kSlotBytes = 128;
inline constexpr size_t kInCallSlots = 512;
// The header's page, then the in-call table (RingHeader::InCall, a cache line each).
inline constexpr size_t kHeaderBytes = 4096 + kInCallSlots * 64;
inline constexpr size_t kDefaultDataBytes = 8u << 20;
inline constexpr size_t kDroppedLogSize = 256;
inline constexpr size_t kThreadDropSlots = 64;

// Slot states. A record is one or more slots; only its first slot says how many. The later
// (continuation) slots each carry kContinuationBytes of the record's payload after their state.
inline constexpr uint32_t kSlotFree = 0;
inline constexpr uint32_t kSlotEvent = 0x45;         // low byte; slot count in bits 8..15
inline constexpr uint32_t kSlotModule = 0x4D;        // a loaded module's executable range
inline constexpr uint32_t kSlotCode = 0x50;          // a Python code object's names
inline constexpr uint32_t kSlotDevices = 0x44;       // the process's CUDA devices
inline constexpr uint32_t kSlotStarted = 0x53;       // a thread entered a recorded call
inline constexpr uint32_t kSlotNotice = 0x4E;        // a sentence about the recording, for the trace
inline constexpr uint32_t kSlotContinuation = 0x43;  // a later slot of a multi-slot record
inline constexpr size_t kContinuationBytes = kSlotBytes - 8;
inline constexpr uint32_t kMaxSlots = 255;

inline constexpr uint32_t make_state(uint32_t type, uint32_t slots) { return type | (slots << 8); }
inline constexpr uint32_t state_type(uint32_t state) { return state & 0xFF; }
inline constexpr uint32_t state_slots(uint32_t state) { return (state >> 8) & 0xFF; }

struct RingHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t slot_bytes;
  uint64_t slot_count;  // a power of two
  int32_t pid;
  uint32_t reserved0;
  alignas(64) std::atomic<uint64_t> head;  // slots reserved by producers
  alignas(64) std::atomic<uint64_t> tail;  // slots consumed by the collector
  alignas(64) std::atomic<uint64_t> next_seq;
  alignas(64) std::atomic<uint64_t> dropped_events;
  // The longest any thread of the process waited for room in the ring, in ns: what recording
  // cost the program beyond its own work when the collector fell behind.
  std::atomic<uint64_t> longest_wait_ns;
  // Sequence numbers (plus one; 0 is "not written yet") of dropped events, so the collector does
  // not wait for them. When the log is full the collector learns of the rest from dropped_events.
  std::atomic<uint64_t> dropped_log_count;
  std::atomic<uint64_t> dropped_log[kDroppedLogSize];
  // Each thread's latest dropped event, so the collector does not take the call it ended for one
  // the process died inside. A slot is claimed once per thread (tid 0: free); threads that found
  // no free slot are counted in thread_drops_unplaced.
  struct ThreadDrop {
    std::atomic<uint32_t> tid;
    std::atomic<uint64_t> t_ns;  // when it was dropped (CLOCK_MONOTONIC)
  } thread_drops[kThreadDropSlots];
  std::atomic<uint64_t> thread_drops_unplaced;
  // Each thread's recorded call in progress, so that a process killed inside one leaves it behind
  // (the call's own record comes only after it returns). A thread claims a slot on its first
  // recorded call (tid 0: free) and frees it when it exits; only that thread writes it, with plain
  // stores: cheaper than a record per call, which is what a thread that found no free slot
  // publishes instead (StartedRecord). A cache line each, so that threads do not share one.
  struct alignas(64) InCall {
    std::atomic<uint32_t> tid;
    std::atomic<uint32_t> api;   // the call's Api plus one; 0 between calls
    std::atomic<uint64_t> seq;   // once the call took its place in the order, its seq plus one; else 0
    std::atomic<uint64_t> t_ns;  // the time it took then (CLOCK_MONOTONIC)
  };
  alignas(4096) InCall in_calls[kInCallSlots];
};
static_assert(sizeof(RingHeader) <= kHeaderBytes && kHeaderBytes % 4096 == 0);
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free,
              "ring atomics must be lock-free to work across processes");

// What an event's Python frames are.
enum PythonState : uint8_t {
  kNoPython = 0,        // no Python interpreter in the process (or Python stacks are off)
  kPythonFrames = 1,    // the thread's Python frames follow
  kPythonNoGil = 2,     // Python runs, but this thread did not hold the GIL and its frames could
                        // not be read (an interpreter whose layout memtrace does not know)
  kPythonNoFrames = 3,  // Python runs, and this thread runs no Python code (a native thread)
};

// One event: the Event as the injector recorded it (t_ns on CLOCK_MONOTONIC; its stack and its
// name's string id are the collector's to fill), its place in the order, and what its payload
// holds: native_frames return addresses (innermost first), then python_frames pairs of (code id,
// instruction byte offset; or the line, for code described with LineTable::kLines), innermost
// first, then name_bytes of a name (NVTX marks and ranges: the message; not NUL-terminated).
inline constexpr size_t kMaxNameBytes = 1024;
// Set in a Python frame's code id: the outermost frame of one call of the interpreter's evaluation
// loop (the frames of that call are the ones since the last frame so marked), which is where the
// loop's native frame stands among the native ones. Frames read through the C API have no marks.
inline constexpr uint64_t kEndsLoopCall = uint64_t(1) << 63;
// EventRecord::stack_flags.
inline constexpr uint8_t kStackTruncated = 1;  // the native stack was deeper than the limit
// The stack is its thread's kept one: the thread's next event may end its own stack with this
// one's outermost frames instead of sending them again. A loop allocates from one place, so
// most of a stack is the last one's (41 frames 30 deep: 4 slots a record, 1 this way).
inline constexpr uint8_t kStackKept = 2;
// A stack is taken from its thread's kept one only by a record that lands at most the ring's
// length (slot_count) after it: the consumer forgets a kept stack once it is further behind than
// that, so a thread that stopped allocating holds nothing.
struct EventRecord {
  std::atomic<uint32_t> state;
  uint8_t python_state;  // PythonState
  uint8_t stack_flags;   // kStackTruncated, kStackKept
  uint16_t native_frames;
  uint16_t python_frames;
  uint16_t name_bytes;
  // The stack goes on with the outermost NATIVE_REUSED native frames and PYTHON_REUSED Python
  // frames of the thread's (event.tid's) kept stack, after the payload's own.
  uint16_t native_reused;
  uint16_t python_reused;
  uint64_t seq;
  Event event;
};
static_assert(sizeof(EventRecord) == kSlotBytes);

// A module (executable or shared library) mapped into the process: addresses in [start, end)
// belong to it at ELF virtual address (address - bias). Payload: its path.
struct ModuleRecord {
  std::atomic<uint32_t> state;
  uint32_t path_bytes;
  uint64_t bias;
  uint64_t start;
  uint64_t end;
  uint8_t reserved[96];
};
static_assert(sizeof(ModuleRecord) == kSlotBytes);

// A Python code object seen in a stack for the first time, under an id of its own (a code object
// that dies and leaves its address to another gets another id). Payload: its (qualified) name,
// its file name, then its line table (python_lines.h) of table_bytes.
struct CodeRecord {
  std::atomic<uint32_t> state;
  uint32_t name_bytes;
  uint64_t code;  // the id
  uint32_t file_bytes;
  int32_t first_line;
  uint32_t table_bytes;
  uint8_t table_format;  // python::LineTable
  uint8_t reserved[99];
};
static_assert(sizeof(CodeRecord) == kSlotBytes);

// A thread that has no in-call slot (RingHeader::InCall) is about to make a recorded call:
// published before the real call, so that a process killed inside it leaves a trace of the call.
struct StartedRecord {
  std::atomic<uint32_t> state;
  uint16_t api;
  uint16_t reserved0;
  uint32_t tid;
  uint32_t reserved1;
  uint64_t t_ns;
  uint64_t caller;
  uint8_t reserved[96];
};
static_assert(sizeof(StartedRecord) == kSlotBytes);
// A StartedRecord with this api says the process stops recording on purpose (memtrace.stop,
// memtrace detach) and lives on: calls in flight then are not calls it died inside.
inline constexpr uint16_t kStoppedOnPurpose = 0xFFFF;

// Something about the recording the user should know (Python frames that cannot be read, ...).
// Payload: the sentence.
struct NoticeRecord {
  std::atomic<uint32_t> state;
  uint32_t text_bytes;
  uint8_t reserved[120];
};
static_assert(sizeof(NoticeRecord) == kSlotBytes);

// The devices the process sees, sent once after its first successful call. Payload: per
// device a DeviceEntry, then name_bytes of its name.
struct DevicesRecord {
  std::atomic<uint32_t> state;
  uint32_t count;
  uint8_t reserved[120];
};
static_assert(sizeof(DevicesRecord) == kSlotBytes);

struct DeviceEntry {
  int32_t ordinal;
  uint32_t name_bytes;
  uint64_t total_bytes;
  uint8_t uuid[16];  // all zeros when the driver cannot say
};

// Slots needed for a record whose payload is PAYLOAD bytes.
inline constexpr uint32_t slots_for(size_t payload) {
  return 1 + static_cast<uint32_t>((payload + kContinuationBytes - 1) / kContinuationBytes);
}

// The first message on the control socket, with the ring's memfd attached (SCM_RIGHTS).
// The collector answers with one byte, kHelloAccepted, once it has mapped the ring.
struct Hello {
  uint64_t magic;
  uint32_t version;
  int32_t pid;
  uint64_t ring_bytes;  // header plus data
};
inline constexpr char kHelloAccepted = 'K';

// Sends SIZE bytes of DATA on SOCK with descriptor FD attached (none when FD < 0).
inline ssize_t send_with_fd(int sock, const void* data, size_t size, int fd) {
  iovec iov{const_cast<void*>(data), size};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(cmsg), &fd, sizeof(int));
  }
  ssize_t n;
  do n = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  return n;
}

// A mapped ring: the header (kHeaderBytes) and the data region mapped twice in a row.
struct Mapping {
  RingHeader* header = nullptr;
  unsigned char* data = nullptr;
  size_t data_bytes = 0;
  bool ok() const { return header != nullptr; }
};

inline Mapping map_ring(int fd, size_t data_bytes) {
  Mapping m;
  void* header = ::mmap(nullptr, kHeaderBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (header == MAP_FAILED) return m;
  void* base = ::mmap(nullptr, 2 * data_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) {
    ::munmap(header, kHeaderBytes);
    return m;
  }
  auto* bytes = static_cast<unsigned char*>(base);
  for (int copy = 0; copy < 2; ++copy) {
    if (::mmap(bytes + copy * data_bytes, data_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd,
               kHeaderBytes) == MAP_FAILED) {
      ::munmap(base, 2 * data_bytes);
      ::munmap(header, kHeaderBytes);
      return m;
    }
  }
  m.header = static_cast<RingHeader*>(header);
  m.data = bytes;
  m.data_bytes = data_bytes;
  return m;
}

inline void unmap_ring(Mapping& m) {
  if (!m.ok()) return;
  ::munmap(m.data, 2 * m.data_bytes);
  ::munmap(m.header, kHeaderBytes);
  m = Mapping();
}

// From the mapping's own size, never the shared header's slot_count: the other side could
// change that.
inline unsigned char* slot_at(const Mapping& m, uint64_t index) {
  return m.data + (index & (m.data_bytes / kSlotBytes - 1)) * kSlotBytes;
}

}  // namespace memtrace::ring
