// The collector's control socket: a Unix socket in a private 0700 folder, where each traced
// process introduces itself once and hands over its ring.
#pragma once

#include <unistd.h>

#include <memory>
#include <optional>
#include <string>

#include "memtrace/ring/protocol.h"

namespace memtrace {

struct Introduction {
  int socket = -1;
  int pid = 0;
  ring::Mapping ring;
};

class ControlSocket {
 public:
  static std::unique_ptr<ControlSocket> create(std::string& error);
  ~ControlSocket();

  int fd() const { return fd_; }
  // Whom it takes: processes of user UID (by default, the collector's own user) and, where PID is
  // not 0, only process PID (memtrace attach records the one process). Anyone else who reaches the
  // socket (root's collector for another user's process is reachable by that user) is turned away
  // at once, before a byte is read.
  void accept_only(uid_t uid, pid_t pid) {
    peer_uid_ = uid;
    peer_pid_ = pid;
  }
  const std::string& path() const { return path_; }

  // Takes one waiting connection and its introduction. Returns nothing (and says why) when the
  // peer is not a traced process speaking our protocol.
  std::optional<Introduction> accept(std::string& why);
  // Tells the process we are ready to read its ring; until then it waits.
  static bool welcome(const Introduction& intro);

 private:
  ControlSocket(int fd, std::string folder, std::string path)
      : fd_(fd), folder_(std::move(folder)), path_(std::move(path)) {}
  int fd_;
  uid_t peer_uid_ = ::geteuid();
  pid_t peer_pid_ = 0;
  std::string folder_;
  std::string path_;
};

}  // namespace memtrace
