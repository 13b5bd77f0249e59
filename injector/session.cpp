#include "session.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <ctime>

#include "interpose.h"
#include "memtrace/ring.h"

namespace memtrace::inject {
namespace {

enum State : int { kUninit, kStarting, kActive, kDisabled };

std::atomic<int> g_state{kUninit};
ring::Mapping g_ring;
int g_socket = -1;
uint64_t g_max_stall_ns = 10'000'000'000ull;
StackOptions g_stack_options;
// Set once a publish gave up after the full stall bound; later publishes then do not wait again
// until the ring has room, so a stopped collector costs the program one stall, not one per event.
std::atomic<bool> g_stalled{false};
enum DevicesState : int { kNotDescribed, kDescribing, kDescribed };
std::atomic<int> g_devices_described{kNotDescribed};

thread_local uint32_t t_tid __attribute__((tls_model("initial-exec"))) = 0;
// The consumer's tail as this thread last saw it. The tail only grows, so a stale value can only
// make the ring look fuller than it is: it is read again only when it looks full, which saves a
// cache line from the collector's core on almost every event.
thread_local uint64_t t_known_tail __attribute__((tls_model("initial-exec"))) = 0;

uint32_t current_tid() {
  if (t_tid == 0) t_tid = static_cast<uint32_t>(::syscall(SYS_gettid));
  return t_tid;
}

size_t ring_data_bytes() {
  size_t bytes = ring::kDefaultDataBytes;
  if (const char* s = std::getenv("MEMTRACE_RING_BYTES")) {
    char* end = nullptr;
    unsigned long long v = std::strtoull(s, &end, 10);
    // A power of two, at least 64 KiB (page-aligned for the double mapping), at most 1 GiB.
    if (end != s && v >= (64u << 10) && v <= (1ull << 30) && (v & (v - 1)) == 0) bytes = v;
  }
  return bytes;
}

bool send_hello(int sock, int ring_fd, size_t ring_bytes) {
  ring::Hello hello{ring::kMagic, ring::kVersion, static_cast<int32_t>(::getpid()), ring_bytes};
  if (ring::send_with_fd(sock, &hello, sizeof hello, ring_fd) != static_cast<ssize_t>(sizeof hello)) return false;
  pollfd p{sock, POLLIN, 0};
  int ready;
  do ready = ::poll(&p, 1, 10'000);
  while (ready < 0 && errno == EINTR);
  char answer = 0;
  return ready == 1 && ::recv(sock, &answer, 1, 0) == 1 && answer == ring::kHelloAccepted;
}

// Creates the ring and hands it to the collector. Runs once per process image (again in a forked
// child). Makes no CUDA call.
bool connect_to_collector() {
  const char* path = std::getenv("MEMTRACE_SOCKET");
  if (!path || !*path) return false;
  if (const char* s = std::getenv("MEMTRACE_MAX_STALL_MS"))
    g_max_stall_ns = std::strtoull(s, nullptr, 10) * 1'000'000ull;
  if (const char* s = std::getenv("MEMTRACE_STACK_DEPTH")) g_stack_options.depth = std::atoi(s);
  if (const char* s = std::getenv("MEMTRACE_NATIVE_STACKS")) g_stack_options.native = std::strcmp(s, "0") != 0;
  if (const char* s = std::getenv("MEMTRACE_PYTHON_STACKS")) g_stack_options.python = std::strcmp(s, "0") != 0;

  const size_t data_bytes = ring_data_bytes();
  const size_t total = ring::kHeaderBytes + data_bytes;
  int fd = static_cast<int>(::syscall(SYS_memfd_create, "memtrace-ring", MFD_CLOEXEC));
  if (fd < 0) return false;
  if (::ftruncate(fd, static_cast<off_t>(total)) != 0) {
    ::close(fd);
    return false;
  }
  ring::Mapping m = ring::map_ring(fd, data_bytes);
  if (!m.ok()) {
    ::close(fd);
    return false;
  }
  m.header->magic = ring::kMagic;
  m.header->version = ring::kVersion;
  m.header->slot_bytes = ring::kSlotBytes;
  m.header->slot_count = data_bytes / ring::kSlotBytes;
  m.header->pid = static_cast<int32_t>(::getpid());

  int sock = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  bool ok = sock >= 0 && std::strlen(path) < sizeof addr.sun_path;
  if (ok) {
    std::strcpy(addr.sun_path, path);
    int r;
    do r = ::connect(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    while (r < 0 && errno == EINTR);
    ok = r == 0 && send_hello(sock, fd, total);
  }
  ::close(fd);  // the collector holds its own descriptor; our mapping keeps the memory
  if (!ok) {
    if (sock >= 0) ::close(sock);
    ring::unmap_ring(m);
    return false;
  }
  g_ring = m;
  g_socket = sock;
  return true;
}

// In a forked child the parent's ring and connection are not ours: forget them (the mapping
// goes; the descriptor is the child's copy). The child connects anew if it records.
void forget_parent_session() {
  int state = g_state.load(std::memory_order_relaxed);
  if (state == kActive) {
    ring::unmap_ring(g_ring);
    ::close(g_socket);
    g_socket = -1;
  }
  if (state == kActive || state == kStarting) g_state.store(kUninit, std::memory_order_relaxed);
  g_stalled.store(false, std::memory_order_relaxed);
  g_devices_described.store(kNotDescribed, std::memory_order_relaxed);
  t_tid = 0;
  t_known_tail = 0;
  forget_described_code();
  forget_reported_modules();
}

__attribute__((constructor)) void install_fork_handler() { ::pthread_atfork(nullptr, nullptr, forget_parent_session); }

bool collector_gone() {
  pollfd p{g_socket, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR | POLLNVAL));
}

void count_dropped(uint64_t seq) {
  ring::RingHeader* h = g_ring.header;
  uint64_t i = h->dropped_log_count.fetch_add(1, std::memory_order_relaxed);
  if (i < ring::kDroppedLogSize) h->dropped_log[i].store(seq + 1, std::memory_order_release);  // 0: not written yet
  h->dropped_events.fetch_add(1, std::memory_order_release);
}

// Keeps the longest wait any thread saw, for the trace's footer.
void note_wait(uint64_t started_ns) {
  if (started_ns == 0) return;
  uint64_t waited = monotonic_ns() - started_ns;
  std::atomic<uint64_t>& longest = g_ring.header->longest_wait_ns;
  uint64_t seen = longest.load(std::memory_order_relaxed);
  while (waited > seen && !longest.compare_exchange_weak(seen, waited, std::memory_order_relaxed)) {
  }
}

bool reserve_slots(uint32_t slots, uint64_t& index) {
  ring::RingHeader* h = g_ring.header;
  uint64_t head = h->head.load(std::memory_order_relaxed);
  uint64_t started = 0;  // when this thread began to wait for room, if it had to
  for (;;) {
    uint64_t tail = t_known_tail;
    if (head + slots - tail > h->slot_count) tail = t_known_tail = h->tail.load(std::memory_order_acquire);
    if (head + slots - tail <= h->slot_count) {
      if (h->head.compare_exchange_weak(head, head + slots, std::memory_order_acq_rel, std::memory_order_relaxed)) {
        index = head;
        if (g_stalled.load(std::memory_order_relaxed)) g_stalled.store(false, std::memory_order_relaxed);
        note_wait(started);
        return true;
      }
      continue;
    }
    if (g_stalled.load(std::memory_order_relaxed)) return false;
    if (collector_gone()) {
      g_state.store(kDisabled, std::memory_order_release);
      return false;
    }
    uint64_t now = monotonic_ns();
    if (started == 0) started = now;
    if (now - started >= g_max_stall_ns) {
      g_stalled.store(true, std::memory_order_relaxed);
      note_wait(started);
      return false;
    }
    timespec pause{0, 100'000};
    ::nanosleep(&pause, nullptr);
    head = h->head.load(std::memory_order_relaxed);
  }
}

}  // namespace

uint64_t monotonic_ns() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

bool session_active() {
  int state = g_state.load(std::memory_order_acquire);
  if (state == kActive) return true;
  if (state == kDisabled) return false;
  if (state == kUninit && g_state.compare_exchange_strong(state, kStarting, std::memory_order_acq_rel)) {
    bool ok = connect_to_collector();
    g_state.store(ok ? kActive : kDisabled, std::memory_order_release);
    if (ok) report_new_modules();  // before any event, so every frame finds its module
    return ok;
  }
  // Another thread is connecting: wait for it (it makes no call that could wait on us).
  while ((state = g_state.load(std::memory_order_acquire)) == kStarting) ::sched_yield();
  return state == kActive;
}

void stamp(CallRecord& record) {
  record.seq = g_ring.header->next_seq.fetch_add(1, std::memory_order_relaxed);
  record.t_ns = monotonic_ns();
}

namespace {

// Writes a record into SLOTS reserved slots from INDEX: the payload into the continuation
// slots first, then the first slot, whose state is published last.
void write_record(uint64_t index, uint32_t type, uint32_t slots, const void* first, const void* payload,
                  size_t payload_bytes) {
  auto* bytes = static_cast<const unsigned char*>(payload);
  for (uint32_t i = 1; i < slots; ++i) {
    unsigned char* slot = ring::slot_at(g_ring, index + i);
    size_t offset = (i - 1) * ring::kContinuationBytes;
    size_t n = payload_bytes - offset < ring::kContinuationBytes ? payload_bytes - offset : ring::kContinuationBytes;
    std::memcpy(slot + 8, bytes + offset, n);
    reinterpret_cast<std::atomic<uint32_t>*>(slot)->store(ring::kSlotContinuation, std::memory_order_relaxed);
  }
  unsigned char* slot = ring::slot_at(g_ring, index);
  std::memcpy(slot + 4, static_cast<const unsigned char*>(first) + 4, ring::kSlotBytes - 4);
  reinterpret_cast<std::atomic<uint32_t>*>(slot)->store(ring::make_state(type, slots), std::memory_order_release);
}

// Module and code descriptions: dropped silently if the ring stays full (the frames that need
// them then show addresses only); they never hold the program up longer than an event would.
void publish_description(uint32_t type, const void* first, std::string_view a, std::string_view b) {
  if (g_state.load(std::memory_order_acquire) != kActive) return;
  std::string payload;
  payload.reserve(a.size() + b.size());
  payload.append(a).append(b);
  uint32_t slots = ring::slots_for(payload.size());
  if (slots > ring::kMaxSlots) return;
  uint64_t index;
  if (reserve_slots(slots, index)) write_record(index, type, slots, first, payload.data(), payload.size());
}

}  // namespace

void describe_devices_once(uint64_t caller) {
  // A plain load first: the exchange writes a shared line, which every call would pay for. Only
  // a description that was sent marks the devices described: a driver not ready yet (or a
  // failed count) is asked again after the next successful call.
  int state = g_devices_described.load(std::memory_order_relaxed);
  if (state != kNotDescribed || !g_devices_described.compare_exchange_strong(state, kDescribing)) return;
  std::string payload;
  ring::DevicesRecord rec{};
  bool ok = query_devices(caller, payload, rec.count);
  if (ok) publish_description(ring::kSlotDevices, &rec, payload, {});
  g_devices_described.store(ok ? kDescribed : kNotDescribed, std::memory_order_release);
}

void publish_code(uint64_t code, std::string_view name, std::string_view file) {
  ring::CodeRecord rec{};
  rec.name_bytes = static_cast<uint32_t>(name.size());
  rec.code = code;
  rec.file_bytes = static_cast<uint32_t>(file.size());
  publish_description(ring::kSlotCode, &rec, name, file);
}

void publish_module(uint64_t bias, uint64_t start, uint64_t end, std::string_view path) {
  ring::ModuleRecord rec{};
  rec.path_bytes = static_cast<uint32_t>(path.size());
  rec.bias = bias;
  rec.start = start;
  rec.end = end;
  publish_description(ring::kSlotModule, &rec, path, {});
}

const StackOptions& stack_options() { return g_stack_options; }

void publish_started(Api api, uint64_t caller) {
  if (g_state.load(std::memory_order_acquire) != kActive) return;
  ring::StartedRecord rec;
  rec.api = static_cast<uint16_t>(api);
  rec.tid = current_tid();
  rec.t_ns = monotonic_ns();
  rec.caller = caller;
  uint64_t index;
  if (reserve_slots(1, index)) write_record(index, ring::kSlotStarted, 1, &rec, nullptr, 0);
}

void publish(const CallRecord& r, const StackCapture* stack, std::string_view name) {
  if (g_state.load(std::memory_order_acquire) != kActive) return;
  ring::EventRecord rec;
  rec.api = static_cast<uint16_t>(r.api);
  rec.kind = static_cast<uint8_t>(r.kind);
  rec.python_state = stack ? stack->python_state : 0;
  rec.device = r.device;
  rec.result = r.result;
  rec.tid = current_tid();
  rec.native_frames = stack ? stack->native_count : 0;
  rec.python_frames = stack ? stack->python_count : 0;
  rec.seq = r.seq;
  rec.t_ns = r.t_ns;
  rec.addr = r.addr;
  rec.size = r.size;
  rec.stream = r.stream;
  rec.aux = r.aux;
  rec.flags = static_cast<uint8_t>(r.flags);
  rec.caller = r.caller;
  rec.stack_truncated = stack && stack->truncated;
  rec.device_free = r.device_free;
  rec.device_total = r.device_total;
  // The payload: native addresses, then (code, line) pairs, gathered into one run of words, then
  // the name's bytes.
  uint64_t words[kMaxNativeFrames + 2 * kMaxPythonFrames + ring::kMaxNameBytes / sizeof(uint64_t)];
  size_t count = 0;
  if (stack) {
    std::memcpy(words, stack->native, stack->native_count * sizeof(uint64_t));
    count = stack->native_count;
    std::memcpy(words + count, stack->python, 2 * stack->python_count * sizeof(uint64_t));
    count += 2 * stack->python_count;
  }
  size_t name_bytes = std::min(name.size(), ring::kMaxNameBytes);
  rec.name_bytes = static_cast<uint16_t>(name_bytes);
  if (name_bytes) std::memcpy(reinterpret_cast<char*>(words + count), name.data(), name_bytes);  // data() may be null
  size_t payload = count * sizeof(uint64_t) + name_bytes;
  uint32_t slots = ring::slots_for(payload);
  uint64_t index;
  if (!reserve_slots(slots, index)) {
    if (g_state.load(std::memory_order_relaxed) == kActive) count_dropped(r.seq);
    return;
  }
  write_record(index, ring::kSlotEvent, slots, &rec, words, payload);
}

}  // namespace memtrace::inject
