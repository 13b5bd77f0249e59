// A traced "program" that attacks its collector: malformed introductions, a ring that lies about
// itself, records with impossible sizes and garbage. Run under `memtrace run`, it must leave the
// collector standing, writing nothing outside its folder, and exit with its own status.
// `hostile_client --introduce` and `--silent` are another process that reaches a collector's
// socket (MEMTRACE_SOCKET): one introduces itself properly, one says nothing; each prints what the
// collector did ("welcomed", "turned away") and exits 0.
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include "memtrace/ring/protocol.h"

namespace {

int connect_collector() {
  const char* path = std::getenv("MEMTRACE_SOCKET");
  int sock = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path, sizeof addr.sun_path - 1);
  if (::connect(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) std::exit(3);
  return sock;
}

int make_ring(size_t data_bytes, memtrace::ring::Mapping& m) {
  int fd = static_cast<int>(::syscall(SYS_memfd_create, "hostile", 0));
  (void)!::ftruncate(fd, static_cast<off_t>(memtrace::ring::kHeaderBytes + data_bytes));
  m = memtrace::ring::map_ring(fd, data_bytes);
  return fd;
}

}  // namespace

// Another process at the socket: what the collector answers an introduction, or silence.
int intrude(bool introduce) {
  using namespace memtrace::ring;
  int s = connect_collector();
  if (introduce) {
    Mapping m;
    int fd = make_ring(64u << 10, m);
    m.header->magic = kMagic;
    m.header->version = kVersion;
    m.header->slot_bytes = kSlotBytes;
    m.header->slot_count = (64u << 10) / kSlotBytes;
    Hello hello{kMagic, kVersion, static_cast<int32_t>(::getpid()), kHeaderBytes + (64u << 10)};
    (void)!send_with_fd(s, &hello, sizeof hello, fd);
  }
  char answer = 0;
  ssize_t n = ::read(s, &answer, 1);  // the collector's welcome, or the end of the connection
  std::printf("%s\n", n == 1 && answer == kHelloAccepted ? "welcomed" : "turned away");
  return 0;
}

int main(int argc, char** argv) {
  using namespace memtrace::ring;
  if (argc > 1) return intrude(std::strcmp(argv[1], "--introduce") == 0);
  // 1. Garbage instead of an introduction, then silence, then a short one.
  int s = connect_collector();
  (void)!::write(s, "GET / HTTP/1.0\r\n\r\n", 18);
  ::close(s);
  s = connect_collector();
  ::close(s);
  // 2. A good-looking introduction with no ring attached, and one with a wrong version.
  Hello hello{kMagic, kVersion, static_cast<int32_t>(::getpid()), kHeaderBytes + (64u << 10)};
  s = connect_collector();
  (void)!send_with_fd(s, &hello, sizeof hello, -1);
  ::close(s);
  Hello old = hello;
  old.version = 999;
  s = connect_collector();
  (void)!send_with_fd(s, &old, sizeof old, -1);
  ::close(s);
  // 3. A ring whose size is not what the introduction says, and one claiming a terabyte.
  Mapping m;
  int fd = make_ring(64u << 10, m);
  Hello lying = hello;
  lying.ring_bytes = kHeaderBytes + (1ull << 40);
  s = connect_collector();
  (void)!send_with_fd(s, &lying, sizeof lying, fd);
  ::close(s);
  // 4. A ring that is accepted, then filled with lies: impossible slot counts, payload sizes
  //    beyond the record, unknown record types, random bytes.
  m.header->magic = kMagic;
  m.header->version = kVersion;
  m.header->slot_bytes = kSlotBytes;
  m.header->slot_count = (64u << 10) / kSlotBytes;
  s = connect_collector();
  (void)!send_with_fd(s, &hello, sizeof hello, fd);
  char answer = 0;
  (void)!::read(s, &answer, 1);
  std::mt19937_64 rng(42);
  const uint64_t slots = m.header->slot_count;
  for (uint64_t i = 0; i < slots; ++i) {
    unsigned char* slot = slot_at(m, i);
    for (size_t b = 0; b < kSlotBytes; b += 8) {
      uint64_t v = rng();
      std::memcpy(slot + b, &v, 8);
    }
    uint32_t kinds[] = {kSlotEvent, kSlotModule, kSlotCode, kSlotDevices, kSlotStarted, 0x99};
    uint32_t state = make_state(kinds[rng() % 6], static_cast<uint32_t>(1 + rng() % 255));
    reinterpret_cast<std::atomic<uint32_t>*>(slot)->store(state);
  }
  m.header->head.store(slots * 3);  // claims more than the ring holds
  m.header->dropped_log_count.store(~0ull);
  m.header->dropped_events.store(~0ull);
  ::usleep(200000);  // let the collector chew on it
  ::close(s);
  return 5;
}
