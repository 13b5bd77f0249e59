#include "control_socket.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace memtrace {

std::unique_ptr<ControlSocket> ControlSocket::create(std::string& error) {
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/memtrace-XXXXXX";
  if (!::mkdtemp(templ.data())) {  // mode 0700: only we can reach the socket
    error = "cannot create a private folder for the control socket in " + templ.substr(0, templ.rfind('/')) + ": " +
            std::strerror(errno);
    return nullptr;
  }
  std::string path = templ + "/control";
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) {
    ::rmdir(templ.c_str());
    error = "the control socket path " + path + " is too long; set TMPDIR to a shorter folder";
    return nullptr;
  }
  std::strcpy(addr.sun_path, path.c_str());
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd, 128) != 0) {
    error = "cannot create the control socket " + path + ": " + std::strerror(errno);
    if (fd >= 0) ::close(fd);
    ::unlink(path.c_str());
    ::rmdir(templ.c_str());
    return nullptr;
  }
  return std::unique_ptr<ControlSocket>(new ControlSocket(fd, templ, path));
}

ControlSocket::~ControlSocket() {
  ::close(fd_);
  ::unlink(path_.c_str());
  ::rmdir(folder_.c_str());
}

std::optional<Introduction> ControlSocket::accept(std::string& why) {
  int sock = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (sock < 0) {
    why = errno == EAGAIN ? "" : std::string("accept failed: ") + std::strerror(errno);
    return std::nullopt;
  }
  auto reject = [&](const std::string& reason, int ring_fd = -1) {
    why = reason;
    if (ring_fd >= 0) ::close(ring_fd);
    ::close(sock);
    return std::nullopt;
  };
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return reject("no peer credentials");
  if (cred.uid != peer_uid_ || (peer_pid_ && cred.pid != peer_pid_))
    return reject("process " + std::to_string(cred.pid) + " (user " + std::to_string(cred.uid) +
                  ") is not the one recorded; its connection was refused");

  pollfd p{sock, POLLIN, 0};
  if (::poll(&p, 1, 5000) != 1) return reject("process " + std::to_string(cred.pid) + " never introduced itself");
  ring::Hello hello{};
  iovec iov{&hello, sizeof hello};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  int ring_fd = -1;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) std::memcpy(&ring_fd, CMSG_DATA(c), sizeof(int));
  if (n != static_cast<ssize_t>(sizeof hello) || hello.magic != ring::kMagic)
    return reject("process " + std::to_string(cred.pid) + " sent a malformed introduction", ring_fd);
  if (hello.version != ring::kVersion)
    return reject("process " + std::to_string(cred.pid) + " runs a memtrace injector of protocol version " +
                      std::to_string(hello.version) + ", this collector speaks " + std::to_string(ring::kVersion),
                  ring_fd);
  struct stat st {};
  const uint64_t data_bytes = hello.ring_bytes - ring::kHeaderBytes;
  if (ring_fd < 0 || ::fstat(ring_fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != hello.ring_bytes ||
      hello.ring_bytes <= ring::kHeaderBytes || (data_bytes & (data_bytes - 1)) != 0 || data_bytes % 4096 != 0 ||
      data_bytes > (1ull << 30))  // the injector never asks for more than 1 GiB
    return reject("process " + std::to_string(cred.pid) + " sent an unusable ring", ring_fd);
  ring::Mapping m = ring::map_ring(ring_fd, data_bytes);
  ::close(ring_fd);
  if (!m.ok()) return reject("cannot map the ring of process " + std::to_string(cred.pid));
  if (m.header->magic != ring::kMagic || m.header->slot_count != data_bytes / ring::kSlotBytes ||
      m.header->slot_bytes != ring::kSlotBytes) {
    ring::unmap_ring(m);
    return reject("process " + std::to_string(cred.pid) + " sent a ring with a bad header");
  }
  return Introduction{sock, cred.pid, m};
}

bool ControlSocket::welcome(const Introduction& intro) {
  char answer = ring::kHelloAccepted;
  return ::send(intro.socket, &answer, 1, MSG_NOSIGNAL) == 1;
}

}  // namespace memtrace
