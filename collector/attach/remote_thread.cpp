#include "remote_thread.h"

#include <dirent.h>
#include <elf.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

namespace memtrace::attach {
namespace {

std::vector<int> threads_of(int pid) {
  std::vector<int> tids;
  DIR* dir = ::opendir(("/proc/" + std::to_string(pid) + "/task").c_str());
  if (!dir) return tids;
  while (dirent* e = ::readdir(dir))
    if (e->d_name[0] >= '0' && e->d_name[0] <= '9') tids.push_back(std::atoi(e->d_name));
  ::closedir(dir);
  return tids;
}

// Waits a thread may be stopped in: no C library lock is held across them, and each resumes as
// it was after a ptrace stop (ERESTARTSYS, ERESTARTNOHAND, ERESTART_RESTARTBLOCK: restarted).
// epoll_wait and rt_sigtimedwait are not among them: they return EINTR after a stop.
bool safe_wait(long syscall, uint64_t second_arg) {
  switch (syscall) {
    case SYS_futex:  // glibc 2.34+: condition variables, semaphores and joins wait with FUTEX_WAIT_BITSET; locks with
                     // FUTEX_WAIT
      return (second_arg & ~uint64_t(FUTEX_PRIVATE_FLAG | FUTEX_CLOCK_REALTIME)) == FUTEX_WAIT_BITSET;
    case SYS_nanosleep:
    case SYS_clock_nanosleep:
    case SYS_poll:
    case SYS_ppoll:
    case SYS_select:
    case SYS_pselect6:
    case SYS_pause:
    case SYS_wait4:
    case SYS_waitid:
    case SYS_rt_sigsuspend:
    case SYS_accept:
    case SYS_accept4: return true;
    default: return false;
  }
}

// What /proc says TID is doing, without stopping it: running, in a safe wait, or neither.
enum class Doing { kRunning, kSafeWait, kOther };
Doing what_thread_does(int pid, int tid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/syscall");
  std::string first;
  if (!(in >> first)) return Doing::kOther;
  if (first == "running") return Doing::kRunning;
  long syscall = std::strtol(first.c_str(), nullptr, 10);
  std::string arg1, arg2;
  in >> arg1 >> arg2;
  return syscall >= 0 && safe_wait(syscall, std::strtoull(arg2.c_str(), nullptr, 16)) ? Doing::kSafeWait
                                                                                      : Doing::kOther;
}

// Whether a thread stopped with REGS holds no lock dlopen could need.
bool safe_moment(const user_regs_struct& regs, const std::vector<std::pair<uint64_t, uint64_t>>& unsafe) {
  const auto syscall = static_cast<int64_t>(regs.orig_rax);
  if (syscall >= 0) return safe_wait(syscall, regs.rsi);
  for (const auto& [start, end] : unsafe)
    if (regs.rip >= start && regs.rip < end) return false;
  return true;
}

// Waits for TID's next stop; false when it ended (STATUS says how).
bool wait_stop(int tid, int& status) {
  for (;;) {
    pid_t r = ::waitpid(tid, &status, __WALL);
    if (r == tid) return WIFSTOPPED(status);
    if (r < 0 && errno != EINTR) return false;
  }
}

bool is_interrupt_stop(int status) { return (status >> 16) == PTRACE_EVENT_STOP; }

uint64_t now_ms() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000 + uint64_t(ts.tv_nsec) / 1'000'000;
}

}  // namespace

std::unique_ptr<RemoteThread> RemoteThread::stop_safely(int pid,
                                                        const std::vector<std::pair<uint64_t, uint64_t>>& unsafe,
                                                        int timeout_ms, std::string& why) {
  timespec pause{0, 1'000'000};
  int refused = 0, tried = 0;
  for (const uint64_t deadline = now_ms() + uint64_t(timeout_ms); now_ms() < deadline;) {
    for (int tid : threads_of(pid)) {
      if (what_thread_does(pid, tid) == Doing::kOther) continue;  // never stopped: its call might not resume as it was
      ++tried;
      if (::ptrace(PTRACE_SEIZE, tid, nullptr, nullptr) != 0) {
        if (errno == EPERM) ++refused;
        continue;
      }
      int status = 0;
      if (::ptrace(PTRACE_INTERRUPT, tid, nullptr, nullptr) != 0 || !wait_stop(tid, status)) continue;
      if (!is_interrupt_stop(status)) {  // a signal on its way to the thread: delivered as it would be
        ::ptrace(PTRACE_DETACH, tid, nullptr, reinterpret_cast<void*>(static_cast<long>(WSTOPSIG(status))));
        continue;
      }
      user_regs_struct regs;
      if (::ptrace(PTRACE_GETREGS, tid, nullptr, &regs) == 0 && safe_moment(regs, unsafe)) {
        std::unique_ptr<RemoteThread> thread(new RemoteThread(pid, tid, regs));
        if (!thread->vector_state_.empty()) return thread;
        thread.reset();  // its vector registers cannot be saved: let go as it was
        why = "its threads' vector registers cannot be read (PTRACE_GETREGSET NT_X86_XSTATE)";
        return nullptr;
      }
      ::ptrace(PTRACE_DETACH, tid, nullptr, nullptr);
    }
    if (tried && refused == tried) {
      why = "the system does not let memtrace trace it (ptrace: " + std::string(std::strerror(EPERM)) + ")";
      return nullptr;
    }
    if (::kill(pid, 0) != 0) {
      why = "it ended";
      return nullptr;
    }
    ::nanosleep(&pause, nullptr);
  }
  why = "none of its threads stopped at a moment it held none of the C library's locks, in " +
        std::to_string(timeout_ms / 1000) +
        " s of trying (all of them inside malloc, the loader or a system call that a stop would interrupt?); try "
        "again";
  return nullptr;
}

RemoteThread::RemoteThread(int pid, int tid, const user_regs_struct& saved) : pid_(pid), tid_(tid), saved_(saved) {
  mem_ = ::open(("/proc/" + std::to_string(pid) + "/mem").c_str(), O_RDWR | O_CLOEXEC);
  next_ = (saved.rsp - 128) & ~uint64_t(15);  // below the red zone, which the interrupted code may use
  // The vector registers: the calls clobber xmm/ymm registers the interrupted code may still use.
  vector_state_.resize(64 << 10);
  iovec io{vector_state_.data(), vector_state_.size()};
  if (::ptrace(PTRACE_GETREGSET, tid, reinterpret_cast<void*>(NT_X86_XSTATE), &io) == 0)
    vector_state_.resize(io.iov_len);
  else
    vector_state_.clear();
}

RemoteThread::~RemoteThread() {
  if (mem_ >= 0) ::close(mem_);
  if (gone_) return;
  // As it was: an interrupted system call (orig_rax, and rax's restart code) is restarted by the
  // kernel when the thread resumes; the vector registers as they were.
  ::ptrace(PTRACE_SETREGS, tid_, nullptr, &saved_);
  if (!vector_state_.empty()) {
    iovec io{vector_state_.data(), vector_state_.size()};
    ::ptrace(PTRACE_SETREGSET, tid_, reinterpret_cast<void*>(NT_X86_XSTATE), &io);
  }
  // The signals held during the calls: the first delivered as the thread resumes, with its own
  // siginfo (the thread is in a signal-delivery stop, the call's SIGSEGV, which this replaces);
  // any others sent again.
  long first = 0;
  if (!held_.empty() && ::ptrace(PTRACE_SETSIGINFO, tid_, nullptr, &held_.front()) == 0) first = held_.front().si_signo;
  ::ptrace(PTRACE_DETACH, tid_, nullptr, reinterpret_cast<void*>(first));
  for (size_t i = first ? 1 : 0; i < held_.size(); ++i) ::syscall(SYS_tgkill, pid_, tid_, held_[i].si_signo);
}

uint64_t RemoteThread::push(const void* bytes, size_t size) {
  next_ = (next_ - size) & ~uint64_t(15);
  if (mem_ < 0 || ::pwrite(mem_, bytes, size, static_cast<off_t>(next_)) != static_cast<ssize_t>(size)) return 0;
  return next_;
}

std::string RemoteThread::read_string(uint64_t addr, size_t max) {
  std::string text(max, '\0');
  ssize_t n = mem_ >= 0 && addr ? ::pread(mem_, text.data(), max, static_cast<off_t>(addr)) : -1;
  if (n <= 0) return {};
  text.resize(strnlen(text.data(), static_cast<size_t>(n)));
  return text;
}

bool RemoteThread::call(uint64_t fn, std::initializer_list<uint64_t> args, uint64_t& result, std::string& why) {
  user_regs_struct regs = saved_;
  // The return address is 0: the function's return stops the thread with SIGSEGV at rip 0, where
  // memtrace takes over again. At entry, rsp + 8 is 16-byte aligned (the x86-64 ABI).
  uint64_t sp = (next_ - 256) & ~uint64_t(15);
  sp -= 8;
  const uint64_t zero = 0;
  if (mem_ < 0 || ::pwrite(mem_, &zero, sizeof zero, static_cast<off_t>(sp)) != sizeof zero) {
    why = "cannot write to its memory";
    return false;
  }
  unsigned long long* slots[] = {&regs.rdi, &regs.rsi, &regs.rdx, &regs.rcx, &regs.r8, &regs.r9};
  size_t i = 0;
  for (uint64_t a : args) *slots[i++] = a;
  regs.rsp = sp;
  regs.rip = fn;
  regs.rax = 0;
  regs.orig_rax = static_cast<unsigned long long>(-1);  // no system call to restart on the way out
  regs.eflags &= ~((1ull << 10) | (1ull << 8));         // the ABI's clear direction flag; no single-stepping
  if (::ptrace(PTRACE_SETREGS, tid_, nullptr, &regs) != 0 || ::ptrace(PTRACE_CONT, tid_, nullptr, nullptr) != 0) {
    why = std::string("ptrace: ") + std::strerror(errno);
    return false;
  }
  for (;;) {
    int status = 0;
    if (!wait_stop(tid_, status)) {
      gone_ = true;
      why = "it ended during the call";
      return false;
    }
    if (is_interrupt_stop(status)) {  // a group stop (SIGSTOP to the process): the call goes on
      ::ptrace(PTRACE_CONT, tid_, nullptr, nullptr);
      continue;
    }
    siginfo_t info{};
    ::ptrace(PTRACE_GETSIGINFO, tid_, nullptr, &info);
    const int sig = WSTOPSIG(status);
    const bool fault = (sig == SIGSEGV || sig == SIGBUS || sig == SIGILL || sig == SIGFPE) && info.si_code > 0;
    if (fault) {  // raised by the call itself
      user_regs_struct now;
      if (sig == SIGSEGV && ::ptrace(PTRACE_GETREGS, tid_, nullptr, &now) == 0 && now.rip == 0) {
        result = now.rax;  // it returned
        return true;
      }
      why = std::string("the call crashed (") + strsignal(sig) + "); the process's loader may be left locked";
      return false;
    }
    // The program's own signal: held, and delivered once the thread is as it was (delivered now,
    // on top of the call, a system call it interrupted would not return EINTR as it should).
    held_.push_back(info);
    ::ptrace(PTRACE_CONT, tid_, nullptr, nullptr);
  }
}

}  // namespace memtrace::attach
