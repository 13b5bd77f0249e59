#include "memtrace/collector/attach.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>

#include "memtrace/base/units.h"
#include "memtrace/ring/environment.h"
#include "process_state.h"
#include "remote_thread.h"
#include "target_modules.h"

namespace memtrace {

namespace fs = std::filesystem;

namespace {

constexpr int kJoined = 0, kCannotJoin = 1, kFailed = 125;

std::atomic<int> g_stop_signal{0};
void on_stop_signal(int sig) { g_stop_signal.store(sig); }

uint64_t now_ns() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return text;
}

// glibc's C library and loader, by their names since 2.34 (libc.so.6, ld-linux-x86-64.so.2) and
// before (libc-2.31.so, ld-2.31.so).
const attach::MappedModule* find_libc(const std::vector<attach::MappedModule>& modules) {
  const attach::MappedModule* m = attach::find_module(modules, "libc.so");
  return m ? m : attach::find_module(modules, "libc-2.");
}
bool has_loader(const std::vector<attach::MappedModule>& modules) {
  return attach::find_module(modules, "ld-linux") || attach::find_module(modules, "ld-2.");
}

// A field of /proc/PID/status ("TracerPid", "Uid"): its value, or empty.
std::string status_field(int pid, const std::string& name) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(name + ":", 0) == 0) {
      std::string value = line.substr(name.size() + 1);
      value.erase(0, value.find_first_not_of(" \t"));
      return value;
    }
  return {};
}

std::string program_name(int pid) {
  std::string name = read_text("/proc/" + std::to_string(pid) + "/comm");
  if (!name.empty() && name.back() == '\n') name.pop_back();
  return name;
}

// The install layout: bin/memtrace, lib/libmemtrace_inject.so, lib/python.
fs::path library_dir() {
  if (const char* dir = std::getenv(env::kLibDir)) return dir;
  std::error_code ec;
  return fs::read_symlink("/proc/self/exe", ec).parent_path().parent_path() / "lib";
}

// Why ptrace may refuse, where the system says (Yama's ptrace_scope).
std::string ptrace_advice() {
  std::string scope = read_text("/proc/sys/kernel/yama/ptrace_scope");
  if (scope.empty()) return "run memtrace attach as the process's user, or as root";
  switch (scope[0]) {
    case '1':
      return "kernel.yama.ptrace_scope is 1, which lets a process be traced only by its ancestors: run memtrace attach "
             "as root (sudo), or set it to 0 (sudo sysctl kernel.yama.ptrace_scope=0)";
    case '2': return "kernel.yama.ptrace_scope is 2, which lets only root trace processes: run memtrace attach as root";
    case '3': return "kernel.yama.ptrace_scope is 3, which lets no process be traced until the machine restarts";
    default: return "run memtrace attach as the process's user, or as root";
  }
}

// Why PID cannot be joined at all; empty when it can be tried.
std::string why_not_joinable(int pid, const std::vector<attach::MappedModule>& modules) {
  if (pid == ::getpid()) return "it is memtrace itself";
  if (::kill(pid, 0) != 0)
    return errno == ESRCH ? "there is no such process" : "it belongs to another user; " + ptrace_advice();
  if (std::string tracer = status_field(pid, "TracerPid"); !tracer.empty() && tracer != "0")
    return "it is being traced by process " + tracer + " (" + program_name(std::stoi(tracer)) +
           "), and a process has one tracer at a time: detach that debugger first";
  if (std::string state = status_field(pid, "State"); !state.empty() && (state[0] == 'T' || state[0] == 't'))
    return "it is stopped (" + state + "): continue it first (kill -CONT " + std::to_string(pid) + ")";
  if (std::string state = status_field(pid, "State"); !state.empty() && state[0] == 'Z')
    return "it has ended (a zombie)";
  if (modules.empty()) return "its memory map cannot be read; " + ptrace_advice();
#if !defined(__x86_64__)
  return "memtrace attach joins x86-64 processes only";
#endif
  if (!has_loader(modules) && !find_libc(modules))
    return attach::find_module(modules, "ld-musl")
               ? "it uses musl's C library, and memtrace loads into glibc's processes only"
               : "it is statically linked: memtrace loads into a process through its dynamic loader, and this one has "
                 "none";
  if (!attach::find_module(modules, "libcuda.so"))
    return "it is not using CUDA (no libcuda.so in its memory): there is no GPU memory to record";
  if (attach::find_module(modules, "libmemtrace_inject") &&
      read_text("/proc/" + std::to_string(pid) + "/environ").find(std::string(env::kSocket) + "=") != std::string::npos)
    return "it runs under memtrace run, which records all of it already";
  return {};
}

// A listening Unix socket at PATH; -1 with WHY.
int listen_at(const std::string& path, std::string& why) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) {
    why = "the socket path " + path + " is too long; set TMPDIR to a shorter folder";
    return -1;
  }
  std::strcpy(addr.sun_path, path.c_str());
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd, 4) != 0) {
    why = "cannot listen at " + path + ": " + std::strerror(errno);
    if (fd >= 0) ::close(fd);
    return -1;
  }
  return fd;
}

int connect_to(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) return -1;
  std::strcpy(addr.sun_path, path.c_str());
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) return fd;
  if (fd >= 0) ::close(fd);
  return -1;
}

// Whether PATH is a folder of this user's that no one else may enter or change.
bool private_folder(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == ::geteuid() && !(st.st_mode & 077);
}

std::string temp_root() {
  const char* tmp = std::getenv("TMPDIR");
  return tmp && *tmp ? tmp : "/tmp";
}

// Where memtrace attach listens for `memtrace detach PID` (a socket named PID): a rendezvous no
// other user can take, read or block. In the user's runtime folder where there is one
// ($XDG_RUNTIME_DIR, else /run/user/UID: one that is the user's own and writable by no one else),
// memtrace-attached; else each attach makes a private folder of its own,
// TMPDIR/memtrace-attached-UID-XXXXXX (a random name: another user cannot make it first), which
// detach finds by its owner and mode, in TMPDIR and /tmp (detach may be run from a shell with
// another environment than attach's: ssh, sudo, cron).
std::vector<std::string> runtime_roots() {
  std::vector<std::string> roots;
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  for (std::string root : {std::string(runtime ? runtime : ""), "/run/user/" + std::to_string(::geteuid())}) {
    struct stat st;
    if (!root.empty() && ::stat(root.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == ::geteuid() &&
        !(st.st_mode & 022) && std::find(roots.begin(), roots.end(), root) == roots.end())
      roots.push_back(root);
  }
  return roots;
}

std::string runtime_folder(bool make) {
  std::vector<std::string> roots = runtime_roots();
  if (roots.empty()) return {};
  std::string folder = roots.front() + "/memtrace-attached";
  if (make) ::mkdir(folder.c_str(), 0700);
  return private_folder(folder) ? folder : std::string();
}

std::string temp_folder_prefix() { return "memtrace-attached-" + std::to_string(::geteuid()) + "-"; }

// Every folder where a memtrace attach of this user may listen.
std::vector<std::string> rendezvous_folders() {
  std::vector<std::string> out;
  for (const std::string& root : runtime_roots())
    if (private_folder(root + "/memtrace-attached")) out.push_back(root + "/memtrace-attached");
  const std::string prefix = temp_folder_prefix();
  for (const std::string& tmp : {temp_root(), std::string("/tmp")}) {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(tmp, ec))
      if (entry.path().filename().string().rfind(prefix, 0) == 0 && private_folder(entry.path().string()) &&
          std::find(out.begin(), out.end(), entry.path().string()) == out.end())
        out.push_back(entry.path().string());
  }
  return out;
}

// A rendezvous folder for this attach (MADE: a temporary one of its own, removed at its end);
// empty, with WHY, when none can be had.
std::string make_rendezvous_folder(bool& made, std::string& why) {
  made = false;
  if (std::string runtime = runtime_folder(true); !runtime.empty()) return runtime;
  std::string folder = temp_root() + "/" + temp_folder_prefix() + "XXXXXX";
  if (!::mkdtemp(folder.data())) {
    why = "cannot make a private folder in " + temp_root() + ": " + std::strerror(errno);
    return {};
  }
  made = true;
  return folder;
}

// One line from FD (without its newline), waiting up to TIMEOUT_MS; nullopt at the end or timeout.
std::optional<std::string> read_line(int fd, std::string& buffer, int timeout_ms) {
  const uint64_t deadline = now_ns() + uint64_t(timeout_ms) * 1'000'000ull;
  for (;;) {
    if (size_t end = buffer.find('\n'); end != std::string::npos) {
      std::string line = buffer.substr(0, end);
      buffer.erase(0, end + 1);
      return line;
    }
    const uint64_t now = now_ns();
    if (now >= deadline) return std::nullopt;
    pollfd p{fd, POLLIN, 0};
    int ready = ::poll(&p, 1, static_cast<int>((deadline - now) / 1'000'000ull) + 1);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    char chunk[512];
    ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::nullopt;
    buffer.append(chunk, static_cast<size_t>(n));
  }
}

void write_all(int fd, const std::string& text) {
  for (size_t sent = 0; sent < text.size();) {
    ssize_t n = ::send(fd, text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == ENOTSOCK) n = ::write(fd, text.data() + sent, text.size() - sent);
    if (n <= 0) return;
    sent += static_cast<size_t>(n);
  }
}

// The collector: `memtrace _record --attached`, as memtrace.record starts it, in a session of its
// own (the terminal's Ctrl-C is for memtrace attach, which stops it in order).
struct Collector {
  pid_t pid = -1;
  int input = -1, output = -1;
  std::string buffer, socket, folder;

  bool start(const AttachOptions& o, std::string& why) {
    int to_child[2], from_child[2];
    if (::pipe2(to_child, O_CLOEXEC) != 0 || ::pipe2(from_child, O_CLOEXEC) != 0) {
      why = std::string("cannot make a pipe: ") + std::strerror(errno);
      return false;
    }
    std::vector<std::string> args{"/proc/self/exe",
                                  "_record",
                                  "--attached",
                                  "--pid",
                                  std::to_string(o.pid),
                                  "--compress",
                                  std::to_string(o.compression)};
    if (!o.output_dir.empty()) args.insert(args.end(), {"-o", o.output_dir});
    if (!o.summary || o.snapshot) args.push_back("--no-summary");  // --snapshot: the snapshot is the answer
    std::string self = fs::read_symlink("/proc/self/exe").string();
    args[0] = self;
    pid = ::fork();
    if (pid == 0) {
      ::setsid();
      ::dup2(to_child[0], STDIN_FILENO);
      ::dup2(from_child[1], STDOUT_FILENO);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(self.c_str(), argv.data());
      ::_exit(127);
    }
    ::close(to_child[0]);
    ::close(from_child[1]);
    input = to_child[1];
    output = from_child[0];
    if (pid < 0) {
      why = std::string("cannot start memtrace's collector: ") + std::strerror(errno);
      return false;
    }
    for (int i = 0; i < 2; ++i) {
      std::optional<std::string> line = read_line(output, buffer, 30'000);
      if (!line) break;
      if (line->rfind("socket ", 0) == 0) socket = line->substr(7);
      if (line->rfind("folder ", 0) == 0) folder = line->substr(7);
    }
    if (socket.empty() || folder.empty()) {
      why = "memtrace's collector could not start (its message above says why)";
      finish();
      return false;
    }
    return true;
  }

  // "N snapshot": the path, or empty (WHY).
  std::string snapshot(std::string& why) {
    write_all(input, "1 snapshot\n");
    for (;;) {
      std::optional<std::string> line = read_line(output, buffer, 120'000);
      if (!line) {
        why = "memtrace's collector did not answer";
        return {};
      }
      if (line->rfind("1 snapshot ", 0) == 0) return line->substr(11);
      if (line->rfind("1 failed ", 0) == 0) {
        why = line->substr(9);
        return {};
      }
    }
  }

  // Ends the recording: the trace is finished and the summary printed. A process that ENDED is
  // not told to stop: the collector says it ended.
  void finish(bool ended = false) {
    if (pid <= 0) return;
    if (!ended) write_all(input, "stop\n");
    ::close(input);
    int status;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    ::close(output);
    pid = -1;
  }
};

// Lets process PID's user connect to SOCKET, which memtrace made in a private folder of its own
// (mkdtemp): as root, for another user's process, the socket becomes that user's and the folder
// root's still, entered but never listed or changed by anyone else (0711). Nothing there can be
// swapped for a link, and no other user reaches the socket.
void let_connect(const std::string& socket, int pid) {
  const std::optional<ProcessIds> target = process_ids(pid);
  if (::geteuid() != 0 || !target || target->uid == 0) return;
  ::chmod(fs::path(socket).parent_path().c_str(), 0711);
  ::fchownat(AT_FDCWD, socket.c_str(), target->uid, target->gid, AT_SYMLINK_NOFOLLOW);
  ::chmod(socket.c_str(), 0600);
}

// Whether the peer connected at SOCK is process PID.
bool peer_is(int sock, int pid) {
  ucred cred{};
  socklen_t len = sizeof cred;
  return ::getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && cred.pid == pid;
}

// Loads the injector into PID and calls memtrace_attach(SETTINGS) there; empty, or why not.
std::string inject(int pid, const std::vector<attach::MappedModule>& modules, const fs::path& injector,
                   const std::string& settings) {
  const attach::MappedModule* libc = find_libc(modules);
  const attach::MappedModule* libdl = attach::find_module(modules, "libdl.so");
  std::optional<uint64_t> dlopen_fn, dlerror_fn;
  uint64_t dlopen_flags = RTLD_NOW;
  for (const attach::MappedModule* m : {libc, libdl}) {  // glibc 2.34+: libc; before: libdl, when loaded
    if (m && !dlopen_fn && (dlopen_fn = attach::exported_function(pid, *m, "dlopen")))
      dlerror_fn = attach::exported_function(pid, *m, "dlerror");
  }
  if (!dlopen_fn && libc && (dlopen_fn = attach::exported_function(pid, *libc, "__libc_dlopen_mode")))
    dlopen_flags |= 0x80000000;  // __RTLD_DLOPEN: as dlopen itself calls it
  if (!dlopen_fn) return "its C library exports no dlopen memtrace can call";

  // The code whose locks dlopen may need: a thread running it is never the one stopped. A malloc
  // preloaded in place of glibc's (jemalloc, tcmalloc, mimalloc: common beside PyTorch) too.
  std::vector<std::pair<uint64_t, uint64_t>> unsafe;
  for (const attach::MappedModule& m : modules) {
    std::string name = m.path.substr(m.path.rfind('/') + 1);
    for (const char* prefix : {"libc.so", "libc-2.", "ld-linux", "ld-2.", "libpthread", "libdl.so", "libstdc++",
                               "libgcc_s", "libjemalloc", "libtcmalloc", "libmimalloc"})
      if (name.rfind(prefix, 0) == 0) unsafe.insert(unsafe.end(), m.code.begin(), m.code.end());
  }
  std::string why;
  std::unique_ptr<attach::RemoteThread> thread = attach::RemoteThread::stop_safely(pid, unsafe, 10'000, why);
  if (!thread) return why;
  // The program may have replaced itself (exec) since its memory map was read: then the addresses
  // are another program's.
  const std::vector<attach::MappedModule> modules_now = attach::mapped_modules(pid);
  const attach::MappedModule* libc_now = find_libc(modules_now);
  if (!libc || !libc_now || libc_now->start != libc->start || libc_now->path != libc->path)
    return "it replaced its program (exec) while memtrace was joining it; try again";
  uint64_t handle = 0;
  if (!thread->call(*dlopen_fn, {thread->push_string(injector.string()), dlopen_flags}, handle, why))
    return "loading memtrace failed: " + why;
  if (handle == 0) {
    uint64_t message = 0;
    std::string text;
    if (dlerror_fn && thread->call(*dlerror_fn, {}, message, why)) text = thread->read_string(message);
    return "its dynamic loader could not load memtrace's injector" + (text.empty() ? "" : ": " + text);
  }
  std::vector<attach::MappedModule> now = attach::mapped_modules(pid);
  const attach::MappedModule* loaded = attach::find_module(now, "libmemtrace_inject");
  std::optional<uint64_t> start = loaded ? attach::exported_function(pid, *loaded, "memtrace_attach") : std::nullopt;
  if (!start) return "memtrace's injector was loaded, but its memtrace_attach cannot be found";
  uint64_t answer = 0;
  if (!thread->call(*start, {thread->push_string(settings)}, answer, why)) return "starting memtrace failed: " + why;
  if (static_cast<int>(answer) == 1) return "another memtrace attach is joining it right now";
  if (static_cast<int>(answer) == 3)
    return "it runs set-user-ID or set-group-ID (AT_SECURE), and memtrace records no such program";
  if (static_cast<int>(answer) != 0) return "memtrace's thread could not be started in it";
  return {};
}

}  // namespace

int attach_command(const AttachOptions& o, std::string* snapshot_path) {
  const int pid = o.pid;
  std::vector<attach::MappedModule> modules = attach::mapped_modules(pid);
  if (std::string why = why_not_joinable(pid, modules); !why.empty()) {
    std::fprintf(stderr, "memtrace attach: cannot join process %d: %s\n", pid, why.c_str());
    return kCannotJoin;
  }
  fs::path libs = library_dir();
  fs::path injector = fs::absolute(libs / "libmemtrace_inject.so");
  if (!fs::exists(injector)) {
    std::fprintf(stderr, "memtrace attach: the injector %s is missing; reinstall memtrace\n", injector.c_str());
    return kFailed;
  }

  // One memtrace attached to a process at a time (its injector refuses a second one too): each
  // listens for detach at PID in its rendezvous folder.
  for (const std::string& folder : rendezvous_folders())
    if (int fd = connect_to(folder + "/" + std::to_string(pid)); fd >= 0) {
      ::close(fd);
      std::fprintf(stderr,
                   "memtrace attach: cannot join process %d: memtrace is attached to it already (memtrace detach %d "
                   "ends that)\n",
                   pid, pid);
      return kCannotJoin;
    }
  std::string why;
  bool made_folder = false;
  const std::string folder = make_rendezvous_folder(made_folder, why);
  if (folder.empty()) {
    std::fprintf(stderr, "memtrace attach: %s\n", why.c_str());
    return kFailed;
  }
  const std::string detach_path = folder + "/" + std::to_string(pid);
  ::unlink(detach_path.c_str());  // left by a memtrace attach that was killed
  int detach_listener = listen_at(detach_path, why);
  if (detach_listener < 0) {
    std::fprintf(stderr, "memtrace attach: %s\n", why.c_str());
    if (made_folder) ::rmdir(folder.c_str());
    return kFailed;
  }
  struct stat listening {};
  ::lstat(detach_path.c_str(), &listening);
  std::string report_folder = temp_root() + "/memtrace-attach-XXXXXX";
  int report_listener = -1;
  if (::mkdtemp(report_folder.data())) report_listener = listen_at(report_folder + "/report", why);
  auto cleanup = [&] {
    ::close(detach_listener);
    // Only our own socket: another attach of this user (to the same process, refused by its
    // injector) may have put its own there since.
    struct stat now {};
    if (::lstat(detach_path.c_str(), &now) == 0 && now.st_ino == listening.st_ino && now.st_dev == listening.st_dev)
      ::unlink(detach_path.c_str());
    if (made_folder) ::rmdir(folder.c_str());
    if (report_listener >= 0) ::close(report_listener);
    ::unlink((report_folder + "/report").c_str());
    ::rmdir(report_folder.c_str());
  };
  if (report_listener < 0) {
    std::fprintf(stderr, "memtrace attach: %s\n", why.empty() ? std::strerror(errno) : why.c_str());
    cleanup();
    return kFailed;
  }
  std::signal(SIGPIPE, SIG_IGN);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) std::signal(sig, on_stop_signal);

  Collector collector;
  if (!collector.start(o, why)) {
    std::fprintf(stderr, "memtrace attach: %s\n", why.c_str());
    cleanup();
    return kFailed;
  }
  let_connect(collector.socket, pid);
  let_connect(report_folder + "/report", pid);
  std::string settings;
  auto set = [&settings](const std::string& name, const std::string& value) { settings += name + "=" + value + "\n"; };
  set(env::kSocket, collector.socket);
  set(env::kBackend, "cupti");
  set(env::kOutputDir, fs::absolute(collector.folder).string());
  set(env::kInProcess, "1");
  set(env::kStackDepth, std::to_string(o.stack_depth));
  set(env::kNativeStacks, o.native_stacks ? "1" : "0");
  set(env::kPythonStacks, o.python_stacks ? "1" : "0");
  set("MEMTRACE_ATTACH_SOCKET", report_folder + "/report");
  set("MEMTRACE_SHIM_FOLDER", fs::absolute(libs / "python").string());

  auto give_up = [&](const std::string& text) {
    std::fprintf(stderr, "memtrace attach: cannot join process %d: %s\n", pid, text.c_str());
    collector.finish();
    std::error_code ec;
    fs::remove(collector.folder, ec);  // only when empty: nothing was recorded
    cleanup();
    return kCannotJoin;
  };
  // While the thread runs memtrace's calls, memtrace must not die: the thread would return to
  // address 0. Ctrl-C and the like wait until it is let go (SIGKILL cannot be held off).
  sigset_t hold, previous;
  sigemptyset(&hold);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGTSTP}) sigaddset(&hold, sig);
  ::sigprocmask(SIG_BLOCK, &hold, &previous);
  std::string failed = inject(pid, modules, injector, settings);
  ::sigprocmask(SIG_SETMASK, &previous, nullptr);
  if (!failed.empty()) return give_up(failed);

  // memtrace's thread in the process says how its start went.
  int report = -1;
  for (uint64_t waited = 0; report < 0; waited += 100) {
    pollfd p{report_listener, POLLIN, 0};
    if (::poll(&p, 1, 100) == 1) report = ::accept4(report_listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (report >= 0 && !peer_is(report, pid)) {  // only memtrace's thread in the process speaks here
      ::close(report);
      report = -1;
    }
    if (report >= 0) {  // no one else is heard there
      ::close(report_listener);
      report_listener = -1;
      break;
    }
    if (!running(pid)) return give_up("it ended while memtrace was loading");
    if (g_stop_signal.load()) return give_up("interrupted while memtrace's thread in it was starting");
    if (waited == 10'000)
      std::fprintf(stderr, "memtrace attach: waiting for memtrace's thread in process %d to start...\n", pid);
    if (waited == 60'000)
      return give_up("memtrace's thread in it did not reach " + report_folder +
                     "/report in a minute (does the process see another /tmp: a container, systemd's PrivateTmp? "
                     "set TMPDIR to a folder both see)");
  }
  std::string buffer;
  std::optional<std::string> started = read_line(report, buffer, 300'000);  // CUPTI, Python's GIL
  if (!started || started->rfind("started", 0) != 0) {
    ::close(report);
    return give_up(!started                            ? "memtrace's thread in it did not say it started"
                   : started->rfind("failed ", 0) == 0 ? started->substr(7)
                                                       : *started);
  }
  std::fprintf(stderr, "memtrace: attached to process %d (%s), recording into %s/\n", pid, program_name(pid).c_str(),
               collector.folder.c_str());

  int result = kJoined;
  if (o.snapshot) {
    std::string path = collector.snapshot(why);
    if (path.empty()) std::fprintf(stderr, "memtrace attach: no snapshot: %s\n", why.c_str());
    if (snapshot_path) *snapshot_path = path;
    if (path.empty()) result = kFailed;
  } else {
    std::fprintf(stderr, "memtrace: %s, Ctrl-C or memtrace detach %d to stop%s\n",
                 o.duration_ns ? ("for " + format_duration_ns(o.duration_ns)).c_str() : "until the process ends", pid,
                 o.duration_ns ? "" : " earlier");
  }
  // Until it is time to leave: --for, a signal, memtrace detach, or the process's end.
  const uint64_t until = o.duration_ns ? now_ns() + o.duration_ns : UINT64_MAX;
  int detacher = -1;
  bool ended = false;
  while (!o.snapshot && !g_stop_signal.load() && now_ns() < until) {
    // The process's end: its state (its forked children may hold the report socket open).
    if ((ended = !running(pid))) break;
    pollfd fds[2] = {{report, POLLIN, 0}, {detach_listener, POLLIN, 0}};
    int ready = ::poll(fds, 2, 100);
    if (ready <= 0) continue;
    if (fds[0].revents) {  // memtrace's thread ended: the process is ending, or its collector went away
      char chunk[256];
      ssize_t n = ::recv(report, chunk, sizeof chunk, MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        ended = !running(pid);
        break;
      }
    }
    if (fds[1].revents & POLLIN) {  // memtrace detach (anything else that connects is let go)
      int asker = ::accept4(detach_listener, nullptr, nullptr, SOCK_CLOEXEC);
      std::string said;
      if (asker >= 0 && read_line(asker, said, 1000) == std::optional<std::string>("detach")) {
        detacher = asker;
        break;
      }
      if (asker >= 0) ::close(asker);
    }
  }
  if (!ended) {
    write_all(report, "stop\n");
    while (std::optional<std::string> line = read_line(report, buffer, 60'000))
      if (*line == "stopped") break;
  }
  ::close(report);
  collector.finish(ended);
  if (ended)
    std::fprintf(stderr, "memtrace: process %d ended while attached\n", pid);
  else
    std::fprintf(stderr, "memtrace: detached from process %d; it runs on\n", pid);
  if (detacher >= 0) {
    write_all(detacher, "detached " + collector.folder + "\n");
    ::close(detacher);
  }
  cleanup();
  return result;
}

int detach_command(int pid) {
  int fd = -1;
  for (const std::string& folder : rendezvous_folders())
    if ((fd = connect_to(folder + "/" + std::to_string(pid))) >= 0) break;
  if (fd < 0) {
    std::fprintf(stderr,
                 "memtrace detach: memtrace is not attached to process %d (as this user: a memtrace attach run with "
                 "sudo is detached with sudo)\n",
                 pid);
    return 1;
  }
  write_all(fd, "detach\n");
  std::string buffer;
  std::optional<std::string> line = read_line(fd, buffer, 600'000);
  ::close(fd);
  if (line && line->rfind("detached ", 0) == 0)
    std::fprintf(stderr, "memtrace: detached from process %d; its trace is in %s/\n", pid, line->substr(9).c_str());
  else
    std::fprintf(stderr, "memtrace: the memtrace attached to process %d has ended\n", pid);
  return 0;
}

}  // namespace memtrace
