#include "session.h"

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <mutex>
#include <string>
#include <vector>

#include "interpose.h"
#include "kept_stack.h"
#include "memtrace/ring/environment.h"
#include "memtrace/ring/producer.h"
#include "settings.h"

namespace memtrace::inject {
namespace {

enum State : int { kUninit, kStarting, kActive, kDisabled };

std::atomic<int> g_state{kUninit};
// The session's ring. A session that ended keeps its ring mapped (a thread may still be writing
// its last record) and a new one (memtrace attach, again) gets a new ring.
std::atomic<ring::Producer*> g_ring_now{new ring::Producer()};
ring::Producer& ring_now() { return *g_ring_now.load(std::memory_order_acquire); }
int g_socket = -1;
StackOptions g_stack_options;
enum DevicesState : int { kNotDescribed, kDescribing, kDescribed };
std::atomic<int> g_devices_described{kNotDescribed};

thread_local uint32_t t_tid __attribute__((tls_model("initial-exec"))) = 0;

// This thread's in-call slot (ring::RingHeader::InCall) and the ring it is in; null with a ring:
// the table had no room when this thread asked.
thread_local ring::RingHeader::InCall* t_in_call __attribute__((tls_model("initial-exec"))) = nullptr;
thread_local const ring::Producer* t_in_call_ring __attribute__((tls_model("initial-exec"))) = nullptr;
// Gives the slot back at the thread's exit. Made when the library is loaded (before any fork).
pthread_key_t g_in_call_key;
bool g_in_call_key_made = false;
void release_in_call(void* slot) {
  ring::Producer::release_in_call(static_cast<ring::RingHeader::InCall*>(slot));
  t_in_call = nullptr;
  t_in_call_ring = nullptr;
}
__attribute__((constructor)) void make_in_call_key() {
  g_in_call_key_made = ::pthread_key_create(&g_in_call_key, release_in_call) == 0;
}

uint32_t current_tid() {
  if (t_tid == 0) t_tid = static_cast<uint32_t>(::syscall(SYS_gettid));
  return t_tid;
}

size_t ring_data_bytes() {
  size_t bytes = ring::kDefaultDataBytes;
  if (const char* s = setting(env::kRingBytes)) {
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
  const char* path = setting(env::kSocket);
  if (!path || !*path) return false;
  if (const char* s = setting(env::kMaxStallMs))
    ring_now().set_max_stall_ns(std::strtoull(s, nullptr, 10) * 1'000'000ull);
  if (const char* s = setting(env::kStackDepth)) g_stack_options.depth = std::atoi(s);
  if (const char* s = setting(env::kNativeStacks)) g_stack_options.native = std::strcmp(s, "0") != 0;
  if (const char* s = setting(env::kPythonStacks)) g_stack_options.python = std::strcmp(s, "0") != 0;

  const size_t data_bytes = ring_data_bytes();
  int fd = -1;
  if (!ring_now().create(data_bytes, static_cast<int32_t>(::getpid()), fd)) return false;
  int sock = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  bool ok = sock >= 0 && std::strlen(path) < sizeof addr.sun_path;
  if (ok) {
    std::strcpy(addr.sun_path, path);
    int r;
    do r = ::connect(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    while (r < 0 && errno == EINTR);
    ok = r == 0 && send_hello(sock, fd, ring::kHeaderBytes + data_bytes);
  }
  ::close(fd);  // the collector holds its own descriptor; our mapping keeps the memory
  if (!ok) {
    if (sock >= 0) ::close(sock);
    ring_now().release();
    return false;
  }
  g_socket = sock;
  ring_now().set_consumer_socket(sock);
  return true;
}

// In a forked child the parent's ring and connection are not ours: forget them (the mapping
// goes; the descriptor is the child's copy). The child connects anew if it records.
void forget_parent_session() {
  int state = g_state.load(std::memory_order_relaxed);
  if (state == kActive) {
    ring_now().release();
    ::close(g_socket);
    g_socket = -1;
  }
  // Recorded through memtrace attach, the child is not: attach's collector is for its parent.
  if (attach_settings_given())
    g_state.store(kDisabled, std::memory_order_relaxed);
  else if (state == kActive || state == kStarting)
    g_state.store(kUninit, std::memory_order_relaxed);
  g_devices_described.store(kNotDescribed, std::memory_order_relaxed);
  t_tid = 0;
  // The slot was in the parent's ring, unmapped now.
  t_in_call = nullptr;
  t_in_call_ring = nullptr;
  if (g_in_call_key_made) ::pthread_setspecific(g_in_call_key, nullptr);
  forget_described_code();
  forget_reported_modules();
}

__attribute__((constructor)) void install_fork_handler() { ::pthread_atfork(nullptr, nullptr, forget_parent_session); }

// Whether the ring took a record; a consumer that went away turns recording off for good.
bool taken(ring::Producer::Reserved r) {
  if (r == ring::Producer::Reserved::kConsumerGone) g_state.store(kDisabled, std::memory_order_release);
  return r == ring::Producer::Reserved::kYes;
}

// Publishes a record.
bool deliver(uint32_t type, const void* first, const void* payload, size_t bytes) {
  return taken(ring_now().publish(type, first, payload, bytes));
}

// Notices from before the session started (publish_notice), for its start. Under a lock held
// across fork (a child gets it free), as every lock a child may take.
std::mutex g_early_notices_mutex;
std::vector<std::string>* g_early_notices = new std::vector<std::string>();
__attribute__((constructor)) void hold_early_notices_across_fork() {
  ::pthread_atfork([] { g_early_notices_mutex.lock(); }, [] { g_early_notices_mutex.unlock(); },
                   [] { g_early_notices_mutex.unlock(); });
}

void publish_early_notices() {
  std::vector<std::string> notices;
  {
    std::lock_guard lock(g_early_notices_mutex);
    notices.swap(*g_early_notices);
  }
  for (const std::string& n : notices) publish_notice(n);
}

// Module and code descriptions: dropped silently if the ring stays full (the frames that need
// them then show addresses only); they never hold the program up longer than an event would.
void publish_description(uint32_t type, const void* first, std::initializer_list<std::string_view> parts) {
  if (g_state.load(std::memory_order_acquire) != kActive) return;
  std::string payload;
  for (std::string_view part : parts) payload.append(part);
  deliver(type, first, payload.data(), payload.size());
}

std::atomic<uint64_t> g_session_number{0};

// The session's start, once its state is kStarting (no other thread starts one meanwhile).
bool connect_and_start() {
  bool ok = connect_to_collector();
  if (ok) g_session_number.fetch_add(1, std::memory_order_acq_rel);
  g_state.store(ok ? kActive : kDisabled, std::memory_order_release);
  if (ok) report_new_modules();  // before any event, so every frame finds its module
  if (ok) publish_early_notices();
  // CUPTI, when the driver did not load memtrace as its injection library (another tool is).
  if (ok) start_cupti();
  return ok;
}

}  // namespace

bool session_active() {
  int state = g_state.load(std::memory_order_acquire);
  if (state == kActive) return true;
  if (state == kDisabled) return false;
  if (state == kUninit && g_state.compare_exchange_strong(state, kStarting, std::memory_order_acq_rel))
    return connect_and_start();
  // Another thread is connecting: wait for it (it makes no call that could wait on us).
  while ((state = g_state.load(std::memory_order_acquire)) == kStarting) ::sched_yield();
  return state == kActive;
}

bool begin_session() {
  int state = g_state.load(std::memory_order_acquire);
  if ((state != kUninit && state != kDisabled) ||
      !g_state.compare_exchange_strong(state, kStarting, std::memory_order_acq_rel))
    return false;
  if (state == kDisabled) {
    // The ended session's socket was shut down and stays open, and its ring mapped: a thread may
    // still be inside its last publish. Both are left behind (a descriptor and a ring per attach).
    g_socket = -1;
    g_ring_now.store(new ring::Producer(), std::memory_order_release);
    g_devices_described.store(kNotDescribed, std::memory_order_relaxed);
    forget_described_code();
    forget_reported_modules();
    forget_early_torch_events();  // the last session's, held until it could check them
  }
  return connect_and_start();
}

uint64_t session_number() { return g_session_number.load(std::memory_order_acquire); }

bool session_recording() { return g_state.load(std::memory_order_acquire) == kActive; }

void end_session() {
  if (g_state.load(std::memory_order_acquire) == kActive) {
    ring::StartedRecord rec;
    rec.api = ring::kStoppedOnPurpose;
    rec.tid = current_tid();
    rec.t_ns = ring::monotonic_ns();
    deliver(ring::kSlotStarted, &rec, nullptr, 0);
  }
  int state = g_state.exchange(kDisabled, std::memory_order_acq_rel);
  if (state == kActive && g_socket >= 0) ::shutdown(g_socket, SHUT_RDWR);
}

uint64_t stamp(Event& event) {
  event.t_ns = ring::monotonic_ns();
  event.tid = current_tid();
  return ring_now().next_seq();
}

void describe_devices_once(uint64_t caller) {
  // A plain load first: the exchange writes a shared line, which every call would pay for. Only
  // a description that was sent marks the devices described: a driver not ready yet (or a
  // failed count) is asked again after the next successful call.
  int state = g_devices_described.load(std::memory_order_relaxed);
  if (state != kNotDescribed || !g_devices_described.compare_exchange_strong(state, kDescribing)) return;
  std::string payload;
  ring::DevicesRecord rec{};
  bool ok = query_devices(caller, payload, rec.count);
  if (ok) publish_description(ring::kSlotDevices, &rec, {payload});
  g_devices_described.store(ok ? kDescribed : kNotDescribed, std::memory_order_release);
}

void publish_code(uint64_t id, std::string_view name, std::string_view file, int32_t first_line, uint8_t table_format,
                  std::string_view table) {
  ring::CodeRecord rec{};
  rec.name_bytes = static_cast<uint32_t>(name.size());
  rec.code = id;
  rec.file_bytes = static_cast<uint32_t>(file.size());
  rec.first_line = first_line;
  rec.table_format = table_format;
  rec.table_bytes = static_cast<uint32_t>(table.size());
  publish_description(ring::kSlotCode, &rec, {name, file, table});
}

void publish_notice(std::string_view text) {
  if (int state = g_state.load(std::memory_order_acquire); state == kUninit || state == kStarting) {
    // Before the process used CUDA (the Python shim's start): told once the session starts.
    std::lock_guard lock(g_early_notices_mutex);
    if (g_early_notices->size() < 16) g_early_notices->emplace_back(text);
    return;
  }
  ring::NoticeRecord rec{};
  rec.text_bytes = static_cast<uint32_t>(text.size());
  publish_description(ring::kSlotNotice, &rec, {text});
}

void publish_module(uint64_t bias, uint64_t start, uint64_t end, std::string_view path) {
  ring::ModuleRecord rec{};
  rec.path_bytes = static_cast<uint32_t>(path.size());
  rec.bias = bias;
  rec.start = start;
  rec.end = end;
  publish_description(ring::kSlotModule, &rec, {path});
}

const StackOptions& stack_options() { return g_stack_options; }

void enter_call(Api api, uint64_t caller) {
  if (g_state.load(std::memory_order_acquire) != kActive) return;
  const ring::Producer* ring = &ring_now();
  if (t_in_call_ring != ring) {  // this thread's first call in this ring
    t_in_call_ring = ring;
    t_in_call = ring_now().claim_in_call(current_tid());
    if (t_in_call && g_in_call_key_made) ::pthread_setspecific(g_in_call_key, t_in_call);
  }
  if (ring::RingHeader::InCall* slot = t_in_call) {
    slot->seq.store(0, std::memory_order_relaxed);
    slot->api.store(static_cast<uint32_t>(api) + 1, std::memory_order_release);
    return;
  }
  ring::StartedRecord rec;
  rec.api = static_cast<uint16_t>(api);
  rec.tid = current_tid();
  rec.t_ns = ring::monotonic_ns();
  rec.caller = caller;
  deliver(ring::kSlotStarted, &rec, nullptr, 0);
}

void call_ordered(uint64_t seq, uint64_t t_ns) {
  if (ring::RingHeader::InCall* slot = t_in_call) {
    slot->t_ns.store(t_ns, std::memory_order_relaxed);
    slot->seq.store(seq + 1, std::memory_order_release);
  }
}

void leave_call() {
  if (ring::RingHeader::InCall* slot = t_in_call) slot->api.store(0, std::memory_order_release);
}

void record_shim_mark(Api api, uint64_t addr, std::string_view name, int32_t device, uint64_t size) {
  if (t_depth != 0 || g_state.load(std::memory_order_acquire) != kActive) return;
  ++t_depth;
  Event e;
  e.api = api;
  e.kind = api_info(api).kind;
  e.layer = api_info(api).layer;
  e.addr = addr;
  e.device = device;
  e.size = size;
  uint64_t seq = stamp(e);
  publish(e, seq, nullptr, name);
  --t_depth;
}

void publish(const Event& event, uint64_t seq, const StackCapture* stack, std::string_view name) {
  if (g_state.load(std::memory_order_acquire) != kActive) return;
  ring::EventRecord rec;
  rec.python_state = stack ? stack->python_state : 0;
  rec.stack_flags = stack && stack->truncated ? ring::kStackTruncated : 0;
  rec.native_frames = rec.python_frames = rec.native_reused = rec.python_reused = 0;
  rec.seq = seq;
  rec.event = event;
  const int natives = stack ? stack->native_count : 0, pythons = stack ? stack->python_count : 0;
  // The thread's kept stack, in this session: its outermost frames that this stack shares are
  // not sent again. Only for the thread's own events (the collector keeps stacks by event.tid),
  // and not from a signal handler's publish inside another (their records' order is not ours).
  KeptStack* kept = stack && event.tid == current_tid() ? kept_stack() : nullptr;
  if (kept && kept->publishing) kept = nullptr;
  const uint64_t session = g_session_number.load(std::memory_order_relaxed);
  const SharedFrames shared = kept && kept->session == session ? shared_frames(*kept, *stack) : SharedFrames{};
  // Frames it shares were in a module the collector was told of already, unless one was unloaded
  // since (another may stand at its addresses now): that, ensure_... checks even for no frames.
  if (stack) ensure_modules_reported(stack->native, natives - shared.native);
  const size_t name_bytes = std::min(name.size(), ring::kMaxNameBytes);
  rec.name_bytes = static_cast<uint16_t>(name_bytes);
  const size_t far_bytes = static_cast<size_t>(natives + 2 * pythons) * sizeof(uint64_t) + name_bytes;
  const size_t near_bytes = far_bytes - static_cast<size_t>(shared.native + 2 * shared.python) * sizeof(uint64_t);
  if (kept) kept->publishing = true;
  ring::Producer& ring = ring_now();
  uint32_t slots = ring::slots_for(far_bytes);
  uint64_t index = 0;
  ring::Producer::Reserved r =
      slots > ring::kMaxSlots ? ring::Producer::Reserved::kStalled  // never fits: undeliverable
      : kept                  ? ring.reserve_after(kept->index, ring::slots_for(near_bytes), slots, slots, index)
                              : ring.reserve(slots, index);
  if (taken(r)) {
    // Within the ring's length of the kept stack's record the collector still has it.
    const bool near = kept && kept->session == session && ring.within_reach(kept->index, index);
    const SharedFrames reused = near ? shared : SharedFrames{};
    if (kept) rec.stack_flags |= ring::kStackKept;
    // The payload: the frames not reused, then the name's bytes.
    uint64_t words[kMaxNativeFrames + 2 * kMaxPythonFrames + ring::kMaxNameBytes / sizeof(uint64_t)];
    const size_t count = stack ? stack_payload(*stack, reused, rec, words) : 0;
    if (name_bytes) std::memcpy(reinterpret_cast<char*>(words + count), name.data(), name_bytes);  // data() may be null
    ring.write(index, ring::kSlotEvent, slots, &rec, words, count * sizeof(uint64_t) + name_bytes);
    if (kept) keep_stack(*kept, *stack, reused, session, index);
  } else if (g_state.load(std::memory_order_relaxed) == kActive) {
    ring.count_dropped(seq, event.tid, !is_observation(event.api));
  }
  if (kept) kept->publishing = false;
}

}  // namespace memtrace::inject
