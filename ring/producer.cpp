#include "memtrace/ring/producer.h"

#include <poll.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <ctime>

namespace memtrace::ring {
namespace {

// The consumer's tail as this thread last saw it, for one ring. The tail only grows, so a stale
// value can only make the ring look fuller than it is: it is read again only when it looks
// full, which saves a cache line from the consumer's core on almost every record.
struct KnownTail {
  const Producer* ring = nullptr;
  uint64_t tail = 0;
};
thread_local KnownTail t_known_tail __attribute__((tls_model("initial-exec")));

uint64_t& known_tail(const Producer* ring) {
  if (t_known_tail.ring != ring) t_known_tail = KnownTail{ring, 0};
  return t_known_tail.tail;
}

}  // namespace

uint64_t monotonic_ns() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

bool Producer::create(size_t data_bytes, int32_t pid, int& fd) {
  fd = static_cast<int>(::syscall(SYS_memfd_create, "memtrace-ring", MFD_CLOEXEC));
  if (fd < 0) return false;
  Mapping m;
  if (::ftruncate(fd, static_cast<off_t>(kHeaderBytes + data_bytes)) != 0 || !(m = map_ring(fd, data_bytes)).ok()) {
    ::close(fd);
    fd = -1;
    return false;
  }
  m.header->magic = kMagic;
  m.header->version = kVersion;
  m.header->slot_bytes = kSlotBytes;
  m.header->slot_count = data_bytes / kSlotBytes;
  m.header->pid = pid;
  ring_ = m;
  stalled_.store(false, std::memory_order_relaxed);
  return true;
}

void Producer::release() {
  unmap_ring(ring_);
  consumer_socket_ = -1;
  stalled_.store(false, std::memory_order_relaxed);
  known_tail(nullptr) = 0;  // this thread's cache named the old ring
}

bool Producer::consumer_gone() const {
  if (consumer_socket_ < 0) return false;
  pollfd p{consumer_socket_, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR | POLLNVAL));
}

// Keeps the longest wait any thread saw, for the trace's footer.
void Producer::note_wait(uint64_t started_ns) {
  if (started_ns == 0) return;
  uint64_t waited = monotonic_ns() - started_ns;
  std::atomic<uint64_t>& longest = ring_.header->longest_wait_ns;
  uint64_t seen = longest.load(std::memory_order_relaxed);
  while (waited > seen && !longest.compare_exchange_weak(seen, waited, std::memory_order_relaxed)) {
  }
}

Producer::Reserved Producer::reserve(uint32_t slots, uint64_t& index) {
  return reserve_after(0, slots, slots, slots, index);
}

Producer::Reserved Producer::reserve_after(uint64_t since, uint32_t near, uint32_t far, uint32_t& slots,
                                           uint64_t& index) {
  RingHeader* h = ring_.header;
  uint64_t& cached_tail = known_tail(this);
  uint64_t head = h->head.load(std::memory_order_relaxed);
  uint64_t started = 0;  // when this thread began to wait for room, if it had to
  for (;;) {
    slots = within_reach(since, head) ? near : far;  // for the very slot the exchange below takes
    uint64_t tail = cached_tail;
    if (head + slots - tail > h->slot_count) tail = cached_tail = h->tail.load(std::memory_order_acquire);
    if (head + slots - tail <= h->slot_count) {
      if (h->head.compare_exchange_weak(head, head + slots, std::memory_order_acq_rel, std::memory_order_relaxed)) {
        index = head;
        if (stalled_.load(std::memory_order_relaxed)) stalled_.store(false, std::memory_order_relaxed);
        note_wait(started);
        return Reserved::kYes;
      }
      continue;
    }
    if (stalled_.load(std::memory_order_relaxed)) return Reserved::kStalled;
    if (consumer_gone()) return Reserved::kConsumerGone;
    uint64_t now = monotonic_ns();
    if (started == 0) started = now;
    if (now - started >= max_stall_ns_) {
      stalled_.store(true, std::memory_order_relaxed);
      note_wait(started);
      return Reserved::kStalled;
    }
    // 100 us at first, then a quarter of the wait so far, at most 10 ms: a short stall ends
    // within 100 us of room, and a long one neither burns the program's cores (hundreds of
    // threads looking 10,000 times a second starve the ones still working) nor ends more than a
    // quarter late.
    const uint64_t pause_ns = std::clamp<uint64_t>((now - started) / 4, 100'000, 10'000'000);
    timespec pause{0, static_cast<long>(pause_ns)};
    ::nanosleep(&pause, nullptr);
    head = h->head.load(std::memory_order_relaxed);
  }
}

void Producer::write(uint64_t index, uint32_t type, uint32_t slots, const void* first, const void* payload,
                     size_t bytes) {
  auto* data = static_cast<const unsigned char*>(payload);
  for (uint32_t i = 1; i < slots; ++i) {
    unsigned char* slot = slot_at(ring_, index + i);
    size_t offset = (i - 1) * kContinuationBytes;
    size_t n = bytes - offset < kContinuationBytes ? bytes - offset : kContinuationBytes;
    std::memcpy(slot + 8, data + offset, n);
    reinterpret_cast<std::atomic<uint32_t>*>(slot)->store(kSlotContinuation, std::memory_order_relaxed);
  }
  unsigned char* slot = slot_at(ring_, index);
  std::memcpy(slot + 4, static_cast<const unsigned char*>(first) + 4, kSlotBytes - 4);
  reinterpret_cast<std::atomic<uint32_t>*>(slot)->store(make_state(type, slots), std::memory_order_release);
}

Producer::Reserved Producer::publish(uint32_t type, const void* first, const void* payload, size_t bytes) {
  uint32_t slots = slots_for(bytes);
  if (slots > kMaxSlots) return Reserved::kStalled;  // never fits: treated as undeliverable
  uint64_t index;
  Reserved r = reserve(slots, index);
  if (r == Reserved::kYes) write(index, type, slots, first, payload, bytes);
  return r;
}

void Producer::count_dropped(uint64_t seq, uint32_t tid, bool counted) {
  RingHeader* h = ring_.header;
  uint64_t i = h->dropped_log_count.fetch_add(1, std::memory_order_relaxed);
  if (i < kDroppedLogSize) h->dropped_log[i].store(seq + 1, std::memory_order_release);  // 0: not written yet
  if (!counted) return;
  note_thread_drop(tid);
  h->dropped_events.fetch_add(1, std::memory_order_release);
}

RingHeader::InCall* Producer::claim_in_call(uint32_t tid) {
  if (!ring_.ok() || tid == 0) return nullptr;
  RingHeader* h = ring_.header;
  for (size_t probe = 0; probe < kInCallSlots; ++probe) {
    RingHeader::InCall& slot = h->in_calls[(tid + probe) % kInCallSlots];
    uint32_t expected = 0;
    if (slot.tid.load(std::memory_order_relaxed) == 0 &&
        slot.tid.compare_exchange_strong(expected, tid, std::memory_order_acq_rel)) {
      slot.api.store(0, std::memory_order_relaxed);
      slot.seq.store(0, std::memory_order_relaxed);
      return &slot;
    }
  }
  return nullptr;
}

void Producer::release_in_call(RingHeader::InCall* slot) {
  slot->api.store(0, std::memory_order_relaxed);
  slot->tid.store(0, std::memory_order_release);
}

// Only thread TID writes the slot it claimed, so its time needs no more than a store.
void Producer::note_thread_drop(uint32_t tid) {
  RingHeader* h = ring_.header;
  for (size_t probe = 0; probe < kThreadDropSlots; ++probe) {
    RingHeader::ThreadDrop& slot = h->thread_drops[(tid + probe) % kThreadDropSlots];
    uint32_t owner = slot.tid.load(std::memory_order_acquire);
    if (owner == 0) {
      uint32_t expected = 0;
      if (slot.tid.compare_exchange_strong(expected, tid, std::memory_order_acq_rel))
        owner = tid;
      else
        owner = expected;
    }
    if (owner == tid) {
      slot.t_ns.store(monotonic_ns(), std::memory_order_release);
      return;
    }
  }
  h->thread_drops_unplaced.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace memtrace::ring
