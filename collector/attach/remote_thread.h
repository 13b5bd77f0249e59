// One thread of a running process, stopped under ptrace at a moment it holds none of the C
// library's locks, made to call functions of that process (dlopen, then memtrace_attach), then let
// go exactly as it was: its registers, vector ones included, restored; an interrupted system call
// restarted; signals that came during the calls delivered after them, as they would have been.
//
// The moment: a thread blocked in a wait that no C library lock is held across and that resumes
// after a ptrace stop (a condition variable's, a semaphore's or a join's futex wait, sleep, poll,
// select, waitpid, accept, pause), or one running the program's own code (not the C library's,
// the loader's, the C++ runtime's or a preloaded malloc's). Which threads wait, and in what, is
// read from /proc without stopping them: a thread blocked in any other call (epoll_wait, a read)
// is never stopped, since some calls return EINTR after a stop. A thread waiting for a lock (a
// plain futex wait) or inside malloc is never taken: dlopen would wait for the lock it holds.
#pragma once

#include <signal.h>
#include <sys/user.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace memtrace::attach {

class RemoteThread {
 public:
  // Stops a thread of PID at a safe moment, trying for up to TIMEOUT_MS; null with WHY (a
  // sentence) when none could be stopped. UNSAFE: the code ranges of the libraries whose code may
  // hold their locks.
  static std::unique_ptr<RemoteThread> stop_safely(int pid, const std::vector<std::pair<uint64_t, uint64_t>>& unsafe,
                                                   int timeout_ms, std::string& why);
  ~RemoteThread();  // restores the thread's registers and lets it go

  int tid() const { return tid_; }
  // Copies BYTES onto the thread's stack, below its red zone and what was copied before; their
  // address in the process.
  uint64_t push(const void* bytes, size_t size);
  uint64_t push_string(const std::string& text) { return push(text.c_str(), text.size() + 1); }
  // Calls the function at FN with up to six integer ARGS and waits for it to return (its rax in
  // RESULT). False, with WHY, when the process died or the call crashed. There is no time limit: a
  // call abandoned midway would leave the loader's lock held, and memtrace killed during one
  // leaves the thread returning to address 0 (memtrace attach holds off Ctrl-C meanwhile).
  bool call(uint64_t fn, std::initializer_list<uint64_t> args, uint64_t& result, std::string& why);
  // The C string at ADDR (at most MAX bytes).
  std::string read_string(uint64_t addr, size_t max = 4096);
  // The process ended while stopped: nothing to restore.
  bool gone() const { return gone_; }

 private:
  RemoteThread(int pid, int tid, const user_regs_struct& saved);
  int pid_, tid_, mem_ = -1;
  user_regs_struct saved_;
  std::vector<unsigned char> vector_state_;  // XSAVE area (NT_X86_XSTATE): x87, SSE, AVX, ...
  std::vector<siginfo_t> held_;              // signals that came during the calls, delivered after
  uint64_t next_;                            // where the next push goes (grows down)
  bool gone_ = false;
};

}  // namespace memtrace::attach
