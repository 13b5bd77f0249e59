#include "memtrace/collector/run.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>

#include "control_socket.h"
#include "launcher.h"
#include "memtrace/base/folder_trust.h"
#include "memtrace/base/units.h"
#include "memtrace/format/run_folder.h"
#include "memtrace/ring/environment.h"
#include "memtrace/views/report_render.h"
#include "process_state.h"
#include "traced_process.h"

extern char** environ;

namespace memtrace {

namespace fs = std::filesystem;

namespace {

std::atomic<int> g_signal{0};            // a signal to pass on to the program
std::atomic<bool> g_interrupted{false};  // any stop signal reached us
std::atomic<bool> g_snapshot{false};     // SIGUSR1: snapshot every traced process now

void on_snapshot_signal(int) { g_snapshot.store(true); }

// A signal someone sent to memtrace (kill, not the terminal, which signals the whole group and
// so reaches the program itself) is passed on to the program.
void on_signal(int sig, siginfo_t* info, void*) {
  g_interrupted.store(true);
  if (info->si_code <= 0) g_signal.store(sig);
}

uint64_t clock_ns(clockid_t clock) {
  timespec ts;
  ::clock_gettime(clock, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

std::vector<std::string> read_cmdline(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
  std::vector<std::string> args;
  std::string arg;
  while (std::getline(in, arg, '\0')) args.push_back(arg);
  return args;
}

// The process's place in a distributed job: RANK, LOCAL_RANK and WORLD_SIZE from its environment
// (torchrun, mpirun and SLURM launchers set them). Only these: no other variable is ever read.
void read_rank(int pid, pb::TraceHeader& header) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
  std::string entry;
  auto number = [](const std::string& text, int& out) {
    char* end = nullptr;
    long v = std::strtol(text.c_str(), &end, 10);
    if (text.empty() || *end || v < 0 || v > INT32_MAX) return false;
    out = static_cast<int>(v);
    return true;
  };
  while (std::getline(in, entry, '\0')) {
    int v;
    if (entry.rfind("RANK=", 0) == 0 && number(entry.substr(5), v)) header.set_rank(v);
    if (entry.rfind("LOCAL_RANK=", 0) == 0 && number(entry.substr(11), v)) header.set_local_rank(v);
    if (entry.rfind("WORLD_SIZE=", 0) == 0 && number(entry.substr(11), v)) header.set_world_size(v);
  }
}

int read_ppid(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(in, line);
  size_t close = line.rfind(')');
  if (close == std::string::npos) return 0;
  int ppid = 0;
  char state;
  std::sscanf(line.c_str() + close + 1, " %c %d", &state, &ppid);
  return ppid;
}

std::string host_name() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

// The program's install layout: bin/memtrace, lib/libmemtrace_inject.so, lib/sim/.
fs::path library_dir() {
  if (const char* dir = std::getenv(env::kLibDir)) return dir;
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return exe.parent_path().parent_path() / "lib";
}

// Creates the output folder (0700, or as --umask says). For the default name, finds one not taken
// yet. An existing folder is used only when it holds no traces, or when asked to add to them: the
// analyses take a folder's traces as one job's processes.
// Sets the folder memtrace just made at DIR to MODE exactly (whatever the umask), through a
// descriptor of the folder itself: nothing swapped in since is followed.
void set_made_folder_mode(const std::string& dir, mode_t mode) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return;
  ::fchmod(fd, mode);
  ::close(fd);
}

bool make_output_dir(const RunOptions& options, std::string& dir, bool& created, std::string& error) {
  created = false;
  const mode_t dir_mode = options.umask ? 0777 & ~*options.umask : 0700;
  if (!options.output_dir.empty()) {
    dir = options.output_dir;
    std::error_code ec;
    if (fs::is_directory(dir, ec)) {
      // Another user who owns the folder, or may write in it, could swap the traces, plant
      // history that gets merged, or leave a link where memtrace writes.
      struct stat st {};
      if (::stat(dir.c_str(), &st) != 0)
        return error = "cannot use output folder " + dir + ": " + std::strerror(errno), false;
      const bool group_shared = options.umask && !(*options.umask & 020);  // --umask asked the group to write
      if (std::string why = why_folder_is_not_private(st, group_shared); !why.empty())
        return error = "output folder " + dir + " " + why +
                       ", who could change what memtrace writes there; choose a folder of your own that no one else "
                       "may write in" +
                       (why == "may be written by its group" ? " (or share it with --umask 002)" : ""),
               false;
      if (::access(dir.c_str(), W_OK | X_OK) != 0)
        return error = "cannot write to output folder " + dir + ": " + std::strerror(errno), false;
      if (!options.append && run_folder::holds_traces(dir))
        return error = "output folder " + dir +
                       " already holds the traces of another run; choose a new folder, or add --append to "
                       "add this run's traces to them",
               false;
      return true;
    }
    // The folders above it, made as needed ("out/" names out itself: its parent is the current one).
    fs::path folder(dir);
    if (!folder.has_filename()) folder = folder.parent_path();
    fs::path parent = folder.parent_path();
    if (!parent.empty()) fs::create_directories(parent, ec);
    if (::mkdir(dir.c_str(), dir_mode) != 0) {
      error = "cannot create output folder " + dir + ": " + std::strerror(errno);
      return false;
    }
    created = true;
    set_made_folder_mode(dir, dir_mode);
    return true;
  }
  std::time_t now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "memtrace-%Y%m%d-%H%M%S", std::localtime(&now));
  for (int i = 1; i < 100; ++i) {
    dir = i == 1 ? stamp : std::string(stamp) + "-" + std::to_string(i);
    if (::mkdir(dir.c_str(), dir_mode) == 0) {
      created = true;
      set_made_folder_mode(dir, dir_mode);
      return true;
    }
    if (errno != EEXIST) break;
  }
  error = "cannot create output folder " + dir + " in the current folder: " + std::strerror(errno);
  return false;
}

// The output folder (DIR; CREATED when made now) and the control socket the traced processes
// connect to; null, having said why on stderr as WHO, when either cannot be had.
std::unique_ptr<ControlSocket> open_output(const RunOptions& options, const char* who, std::string& dir,
                                           bool& created) {
  std::string error;
  if (!make_output_dir(options, dir, created, error)) {
    std::fprintf(stderr, "%s: %s\n", who, error.c_str());
    return nullptr;
  }
  std::unique_ptr<ControlSocket> control = ControlSocket::create(error);
  if (!control) {
    std::fprintf(stderr, "%s: %s\n", who, error.c_str());
    if (created) ::rmdir(dir.c_str());
  }
  return control;
}

class Collector {
 public:
  // CHILD: the program memtrace started, or (IN_PROCESS: memtrace.record) the running process that
  // asked to be recorded, which is no child of ours and is told apart by its commands on stdin.
  Collector(std::string dir, pid_t child, uint64_t origin_mono, uint64_t origin_unix, ControlSocket& control,
            const RunOptions& options, std::string shim_file, bool in_process = false)
      : dir_(std::move(dir)),
        shim_file_(std::move(shim_file)),
        child_(child),
        in_process_(in_process),
        origin_mono_(origin_mono),
        origin_unix_(origin_unix),
        control_(control),
        compression_(options.compression),
        snapshot_every_ns_(options.snapshot_every_ns),
        redact_args_(options.redact_args),
        attached_(options.attached) {
    snapshot_options_.dir = dir_;
    snapshot_options_.compression = options.compression;
    snapshot_options_.max_oom = options.max_oom_snapshots;
    snapshot_options_.at_peak = options.snapshot_at_peak;
    snapshot_options_.file_mode = options.umask ? 0666 & ~*options.umask : 0600;
  }
  const std::vector<std::string>& snapshots() const { return snapshots_; }

  int loop();
  const std::vector<ProcessReport>& reports() const { return reports_; }
  size_t traced() const { return reports_.size(); }

 private:
  void welcome();
  // Asks P's worker to finish its trace; collect() takes its report once it has.
  void finish(TracedProcess& p, std::optional<int> status, const std::string& reason);
  void collect(TracedProcess& p);
  std::string trace_path(int pid);
  // memtrace.record's commands on stdin, a line each, numbered: "N snapshot" (answered on stdout
  // with "N snapshot PATH", or "N failed WHY"), "N window begin" and "N window end" (answered "N
  // window begun", "N window {JSON}": window.h); "stop" (or the end of input).
  void read_commands();
  void answer();  // what the processes' workers answered

  std::string dir_;
  std::string shim_file_;  // memtrace's Python shim's folder (ending with /): its frames are no part of any stack
  pid_t child_;
  bool in_process_;
  bool stop_command_ = false;  // memtrace.stop said "stop"
  bool input_closed_ = false;  // stdin ended: the process is gone, or let go of us
  bool recorded_process_seen_ = false;
  std::string commands_;  // stdin's bytes not yet a whole line
  uint64_t origin_mono_, origin_unix_;
  ControlSocket& control_;
  int compression_;
  uint64_t snapshot_every_ns_;
  bool redact_args_;
  bool attached_;  // memtrace attach's recording
  SnapshotOptions snapshot_options_;
  std::vector<std::string> snapshots_;  // written so far, by every process
  Symbolizer symbolizer_;               // shared: processes of one run load the same libraries
  std::vector<std::unique_ptr<TracedProcess>> processes_;
  std::map<int, int> images_;  // pid -> traces made for it so far
  std::vector<ProcessReport> reports_;
  std::optional<int> child_status_;
  bool orphans_left_ = false;
  std::string child_end_;
};

std::string Collector::trace_path(int pid) {
  int image = images_[pid]++;
  for (int n = 0;; ++n) {  // never over an existing file (an old run in the same folder)
    std::string path = run_folder::trace_name(dir_, pid, image, n);
    if (!fs::exists(fs::symlink_status(path))) return path;
  }
}

void Collector::welcome() {
  for (;;) {
    std::string why;
    std::optional<Introduction> intro = control_.accept(why);
    if (!intro) {
      if (why.empty()) return;
      std::fprintf(stderr, "memtrace: ignoring a connection: %s\n", why.c_str());
      continue;
    }
    // A new image of a pid we trace (it exec'd): the old image is over.
    for (auto& p : processes_)
      if (p->pid() == intro->pid) finish(*p, std::nullopt, "replaced its program (exec)");
    std::string path = trace_path(intro->pid);
    std::string error;
    std::unique_ptr<TraceWriter> writer = TraceWriter::create(path, error, compression_, snapshot_options_.file_mode);
    if (!writer) {
      std::fprintf(stderr, "memtrace: not tracing process %d: %s\n", intro->pid, error.c_str());
      ring::unmap_ring(intro->ring);
      ::close(intro->socket);
      continue;
    }
    pb::TraceHeader header;
    header.set_memtrace_version(MEMTRACE_VERSION);
    header.set_pid(intro->pid);
    header.set_ppid(read_ppid(intro->pid));
    header.set_host(host_name());
    std::vector<std::string> command = read_cmdline(intro->pid);
    for (size_t i = 0; i < command.size(); ++i)  // --redact-args: the program, then positions only
      header.add_command(redact_args_ && i > 0 ? "$" + std::to_string(i) : command[i]);
    header.set_origin_unix_ns(static_cast<int64_t>(origin_unix_));
    header.set_origin_monotonic_ns(origin_mono_);
    header.set_process_seen_ns(clock_ns(CLOCK_MONOTONIC) - origin_mono_);
    header.set_exec_index(static_cast<uint32_t>(images_[intro->pid] - 1));
    read_rank(intro->pid, header);
    if (in_process_) header.set_recording(attached_ ? pb::TraceHeader::ATTACHED : pb::TraceHeader::IN_PROCESS);
    writer->write_header(header);
    auto process = std::make_unique<TracedProcess>(intro->pid, intro->socket, intro->ring, std::move(writer), header,
                                                   symbolizer_, snapshot_options_, shim_file_);
    process->command.assign(header.command().begin(), header.command().end());
    if (ControlSocket::welcome(*intro)) {
      recorded_process_seen_ |= intro->pid == child_;
      processes_.push_back(std::move(process));
    }
  }
}

void Collector::read_commands() {
  char buffer[256];
  ssize_t n = ::read(STDIN_FILENO, buffer, sizeof buffer);
  if (n <= 0) {
    if (n == 0 || (errno != EINTR && errno != EAGAIN)) input_closed_ = true;
    return;
  }
  commands_.append(buffer, static_cast<size_t>(n));
  for (size_t end; (end = commands_.find('\n')) != std::string::npos;) {
    std::string line = commands_.substr(0, end);
    commands_.erase(0, end + 1);
    if (line == "stop") {
      stop_command_ = true;
      continue;
    }
    // "N COMMAND": N comes back with the answer, so that a caller interrupted while it waited
    // can tell a late answer from the one it waits for.
    const size_t space = line.find(' ');
    const std::string number = line.substr(0, space),
                      command = space == std::string::npos ? "" : line.substr(space + 1);
    auto p = std::find_if(processes_.begin(), processes_.end(),
                          [this](const auto& p) { return p->pid() == child_ && !p->ended(); });
    if (command != "snapshot" && command != "window begin" && command != "window end")
      std::printf("%s failed unknown command: %s\n", number.c_str(), command.c_str());
    else if (p == processes_.end())
      std::printf("%s failed the process is not being recorded\n", number.c_str());
    else if (command == "snapshot")
      (*p)->snapshot(pb::Snapshot::DEMAND, clock_ns(CLOCK_MONOTONIC), number);
    else if (command == "window begin")
      (*p)->begin_window(clock_ns(CLOCK_MONOTONIC), number);
    else
      (*p)->end_window(number);
    std::fflush(stdout);
  }
}

void Collector::answer() {
  bool any = false;
  for (auto& p : processes_)
    for (const std::string& line : p->replies()) {
      std::printf("%s\n", line.c_str());
      any = true;
    }
  if (any) std::fflush(stdout);
}

void Collector::finish(TracedProcess& p, std::optional<int> status, const std::string& reason) {
  p.finish(status, reason, clock_ns(CLOCK_MONOTONIC));
}

void Collector::collect(TracedProcess& p) {
  for (const auto& e : p.snapshot_errors()) std::fprintf(stderr, "memtrace: snapshot: %s\n", e.c_str());
  snapshots_.insert(snapshots_.end(), p.snapshot_paths().begin(), p.snapshot_paths().end());
  if (!p.write_error().empty()) std::fprintf(stderr, "memtrace: %s\n", p.write_error().c_str());
  ProcessReport report = p.report();
  report.command = p.command;
  reports_.push_back(std::move(report));
}

int Collector::loop() {
  bool waiting_note = false;
  uint64_t last_flush = clock_ns(CLOCK_MONOTONIC);
  uint64_t next_periodic = last_flush + snapshot_every_ns_;
  int idle_ms = 0;
  uint64_t last_filling = 0;  // when a drain last found a ring filling
  for (;;) {
    if (int sig = g_signal.exchange(0); sig && !child_status_ && !in_process_) ::kill(child_, sig);
    // Recorded from inside: the process is no child of ours; it ends its recording (or dies)
    // by closing its connection, and memtrace.stop says so on stdin.
    if (in_process_ && !child_status_ && !recorded_process_seen_ &&
        (stop_command_ || input_closed_ || !running(child_)))
      child_status_ = 0;
    // Our children: CMD, and (as the subreaper) any descendant whose parent died before it, such
    // as a daemon. A daemon may use CUDA only later: it is waited for like a traced process.
    for (; !in_process_;) {
      int status = 0;
      pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid <= 0) {
        orphans_left_ = pid == 0;  // 0: children remain, none has ended; -1: none remain
        break;
      }
      if (pid != child_) continue;
      if (WIFEXITED(status)) {
        child_status_ = WEXITSTATUS(status);
        child_end_ = "exited";
      } else {
        child_status_ = 128 + WTERMSIG(status);
        child_end_ = std::string("killed by signal ") + std::to_string(WTERMSIG(status)) + " (" +
                     strsignal(WTERMSIG(status)) + ")";
      }
      g_interrupted.store(false);
    }

    std::vector<pollfd> fds{{control_.fd(), POLLIN, 0}};
    if (in_process_) fds.push_back({input_closed_ ? -1 : STDIN_FILENO, POLLIN, 0});
    const size_t first_process = fds.size();
    std::vector<TracedProcess*> polled;
    for (auto& p : processes_) {
      if (p->ended()) continue;
      fds.push_back({p->socket(), POLLIN | POLLRDHUP, 0});
      polled.push_back(p.get());
    }
    // Once the program has ended, only its processes' workers are waited for: no dozing.
    ::poll(fds.data(), fds.size(), child_status_ ? (processes_.empty() ? 0 : 1) : idle_ms);
    // A traced process never writes after its introduction: readable means it closed its end.
    for (size_t i = first_process; i < fds.size(); ++i)
      if (fds[i].revents & (POLLIN | POLLHUP | POLLRDHUP | POLLERR)) polled[i - first_process]->mark_ended();
    if (fds[0].revents & POLLIN) welcome();
    if (in_process_ && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) read_commands();

    // Only copying here: each process's worker does the rest, so one busy worker never keeps
    // the others' rings from being emptied.
    size_t events = 0;
    bool filling = false;
    for (auto& p : processes_) {
      if (!p->backlogged()) {
        events += p->drain();
        filling |= p->filling();
      }
      bool is_child = p->pid() == child_;
      // Recorded from inside: memtrace.stop lets go of the connection, then says "stop"; a process
      // that dies closes both.
      if (in_process_ && is_child && (stop_command_ || input_closed_ || (p->ended() && !running(child_)))) {
        finish(*p, std::nullopt,
               attached_       ? (stop_command_ ? "memtrace detached; the process ran on"
                                                : "ended while memtrace was attached (its exit status is not known)")
               : stop_command_ ? "recording stopped (memtrace.stop)"
                               : "ended while recorded from inside it (memtrace.record: its exit status is not known)");
        child_status_ = 0;
      } else if (p->ended() && (!is_child || child_status_)) {
        finish(*p, is_child ? child_status_ : std::nullopt,
               is_child ? child_end_ : "closed its connection (a descendant: memtrace cannot see its exit status)");
      }
    }
    if (in_process_) answer();
    // Straight back for 1 ms after a ring was found filling (TracedProcess::filling): its program
    // may be waiting for room, and sleeps 100 us at a time at first. Else a doze of 1 ms, or 2
    // when nothing came (what a program's exit waits to be seen): copying a few records at a time
    // kept a core busy that the program and the workers needed, and woke a worker for each few.
    uint64_t now = clock_ns(CLOCK_MONOTONIC);
    if (filling) last_filling = now;
    idle_ms = now - last_filling < 1'000'000 ? 0 : events ? 1 : std::min(idle_ms + 1, 2);

    bool periodic = snapshot_every_ns_ && now >= next_periodic;
    if (g_snapshot.exchange(false) || periodic) {
      auto reason = periodic ? pb::Snapshot::PERIODIC : pb::Snapshot::DEMAND;
      for (auto& p : processes_) p->snapshot(reason, now);
      if (periodic) next_periodic = now + snapshot_every_ns_;
    }
    if (now - last_flush > 200'000'000ull) {  // what a killed collector leaves on disk stays recent
      for (auto& p : processes_) p->flush();
      last_flush = now;
    }

    std::erase_if(processes_, [this](const auto& p) {  // frees their rings
      if (!p->finished()) return false;
      collect(*p);
      return true;
    });
    // Processes that ended may still have their traces finished by their workers: that is
    // waited for without a word. Processes still running are what the note is about.
    bool running =
        orphans_left_ || std::any_of(processes_.begin(), processes_.end(), [](const auto& p) { return !p->ended(); });
    if (child_status_ && processes_.empty() && !orphans_left_) break;
    if (child_status_ && running) {
      if (g_interrupted.load()) {
        std::fprintf(stderr, "memtrace: interrupted; finishing the traces of processes still running\n");
        for (auto& p : processes_) finish(*p, std::nullopt, "still running when memtrace stopped");
        for (auto& p : processes_) {
          while (!p->finished()) ::usleep(1000);
          collect(*p);
        }
        processes_.clear();
        break;
      }
      if (!waiting_note) {
        std::fprintf(stderr,
                     "memtrace: the program ended; waiting for the processes it left running (Ctrl-C to stop)\n");
        waiting_note = true;
      }
    }
  }
  return *child_status_;
}

// Why a traced process holds no device memory in its trace, in a few words.
std::string no_memory_why(const ProcessReport& r) {
  uint64_t calls = 0, failed = 0;
  for (const auto& [api, counts] : r.calls)
    if (api_info(api).op == Op::kAlloc && api_info(api).layer == Layer::kReserved) {
      calls += counts.calls;
      failed += counts.failed;
    }
  if (calls == 0) return "used CUDA, allocated no device memory";
  if (failed == calls) {
    // The runtime's and the driver's answers when there is no GPU to be had: say so.
    int32_t result = 0;
    for (const auto& [api, counts] : r.calls)
      if (counts.failed) result = counts.last_failure;
    if (result == 35 || result == 100 || result == 999)
      return "no device memory: every allocation failed with CUDA error " + std::to_string(result) +
             (result == 35 ? " (insufficient driver: no NVIDIA driver here)" : " (no CUDA-capable device)") +
             "; without a GPU, memtrace run --sim runs the program on a simulated one";
    return "no device memory: every allocation failed";
  }
  return "no device memory";
}

void print_summary(const std::vector<ProcessReport>& reports, const std::vector<std::string>& snapshots,
                   const std::string& dir) {
  std::fprintf(stderr, "memtrace: %zu traced process%s, traces in %s/\n", reports.size(),
               reports.size() == 1 ? "" : "es", dir.c_str());
  for (const ProcessReport& r : reports) {
    std::string line = "  pid " + std::to_string(r.pid) + " (" + counted(r.events, "event");
    if (r.end_reason.rfind("killed", 0) == 0) line += ", " + r.end_reason;
    if (r.exit_status && *r.exit_status != 0 && r.end_reason.rfind("killed", 0) != 0)
      line += ", exit status " + std::to_string(*r.exit_status);
    line += ")";
    if (r.devices.empty()) line += ": " + no_memory_why(r);
    for (const DeviceReport& d : r.devices)
      line += "; device " + std::to_string(d.device) + ": peak reserved " + format_bytes(d.peak_bytes) + " at " +
              format_duration_ns(d.peak_time_ns);
    if (r.dropped_events) line += "; LOST " + counted(r.dropped_events, "event");
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  for (const auto& path : snapshots) std::fprintf(stderr, "memtrace: snapshot %s\n", path.c_str());
  std::fprintf(stderr, "memtrace: details: memtrace report %s\n", dir.c_str());
}

}  // namespace

int run_command(const RunOptions& options, std::string* output_dir) {
  if (options.command.empty()) {
    std::fprintf(stderr, "memtrace run: no command given; usage: memtrace run [OPTIONS] -- CMD [ARGS...]\n");
    return kExitMemtraceFailed;
  }
  fs::path libs = library_dir();
  fs::path injector = libs / "libmemtrace_inject.so";
  if (!fs::exists(injector)) {
    std::fprintf(stderr, "memtrace run: the injector %s is missing; reinstall memtrace\n", injector.c_str());
    return kExitMemtraceFailed;
  }
  fs::path sim = libs / "sim";
  if (options.sim && !fs::exists(sim / "libcudart.so.13")) {
    std::fprintf(stderr, "memtrace run: --sim: the simulated device is missing from %s\n", sim.c_str());
    return kExitMemtraceFailed;
  }

  std::string dir, error;
  bool created = false;
  std::unique_ptr<ControlSocket> control = open_output(options, "memtrace run", dir, created);
  if (!control) return kExitMemtraceFailed;

  std::vector<std::string> environment;
  for (char** e = environ; *e; ++e) environment.emplace_back(*e);
  set_env(environment, "LD_PRELOAD", injector.string(), true);
  // An injector built with a sanitizer needs its runtime loaded before anything else.
  if (const char* first = std::getenv(env::kPreloadFirst); first && *first)
    set_env(environment, "LD_PRELOAD", first, true);
  set_env(environment, env::kSocket, control->path());
  set_env(environment, env::kOutputDir, std::filesystem::absolute(dir).string());
  char file_mode[8];
  std::snprintf(file_mode, sizeof file_mode, "%o", options.umask ? 0666 & ~*options.umask : 0600);
  set_env(environment, env::kFileMode, file_mode);
  // NVTX marks, ranges and memory regions: the injector is also an NVTX tool. A tool the user
  // already attached (Nsight Systems) keeps its place: NVTX takes one.
  if (!std::getenv("NVTX_INJECTION64_PATH")) set_env(environment, "NVTX_INJECTION64_PATH", injector.string());
  // The shim: Python frames, PyTorch; put there with Python stacks or not.
  set_env(environment, "PYTHONPATH", (libs / "python").string(), true);
  set_env(environment, env::kStackDepth, std::to_string(options.stack_depth));
  set_env(environment, env::kMaxStallMs, std::to_string(options.max_stall_ns / 1'000'000));
  set_env(environment, env::kNativeStacks, options.native_stacks ? "1" : "0");
  set_env(environment, env::kPythonStacks, options.python_stacks ? "1" : "0");
  set_env(environment, env::kBackend, options.backend);
  if (options.verify) set_env(environment, env::kVerify, "1");
  // CUPTI: the driver loads the injector as its injection library on the first cuInit. A tool the
  // user already attached that way (Nsight) keeps its place: the injector subscribes when its
  // session starts instead.
  if ((options.backend != "preload" || options.verify) && !std::getenv("CUDA_INJECTION64_PATH"))
    set_env(environment, "CUDA_INJECTION64_PATH", injector.string());
  if (options.sim) {
    set_env(environment, "LD_LIBRARY_PATH", sim.string(), true);
    if (options.sim_capacity) set_env(environment, "MEMTRACE_SIM_CAPACITY", std::to_string(*options.sim_capacity));
    if (options.sim_devices) set_env(environment, "MEMTRACE_SIM_DEVICES", std::to_string(*options.sim_devices));
  }

  struct sigaction action {};
  action.sa_sigaction = on_signal;
  action.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&action.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) ::sigaction(sig, &action, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  struct sigaction snapshot_action {};
  snapshot_action.sa_handler = on_snapshot_signal;
  snapshot_action.sa_flags = SA_RESTART;
  sigemptyset(&snapshot_action.sa_mask);
  ::sigaction(SIGUSR1, &snapshot_action, nullptr);

  // Descendants orphaned while the program runs (daemons) become our children, so that we can
  // wait for them and their traces.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  uint64_t origin_mono = clock_ns(CLOCK_MONOTONIC);
  uint64_t origin_unix = clock_ns(CLOCK_REALTIME);
  int exit_code = 0;
  pid_t child = launch(options.command, environment, error, exit_code);
  if (child < 0) {
    std::fprintf(stderr, "memtrace run: %s\n", error.c_str());
    if (created) ::rmdir(dir.c_str());
    return exit_code;
  }
  Collector collector(dir, child, origin_mono, origin_unix, *control, options, (libs / "python").string() + "/");
  int status = collector.loop();
  if (collector.traced() == 0) {
    std::fprintf(stderr, "memtrace: no CUDA allocations recorded: the program never used CUDA\n");
    if (created) ::rmdir(dir.c_str());
  } else {
    print_summary(collector.reports(), collector.snapshots(), dir);
    if (output_dir) *output_dir = dir;
  }
  return status;
}

int record_command(const RunOptions& options, int pid) {
  if (pid <= 0 || ::kill(pid, 0) != 0) {
    std::fprintf(stderr, "memtrace _record: no process %d to record\n", pid);
    return kExitMemtraceFailed;
  }
  std::string dir;
  bool created = false;
  std::unique_ptr<ControlSocket> control = open_output(options, "memtrace", dir, created);
  if (!control) return kExitMemtraceFailed;
  // The process and (memtrace.record) its children, of its user: root's collector of another
  // user's process (memtrace attach) takes no one else.
  if (const std::optional<ProcessIds> process = process_ids(pid))
    control->accept_only(process->uid, options.attached ? pid : 0);
  std::signal(SIGPIPE, SIG_IGN);
  std::printf("socket %s\nfolder %s\n", control->path().c_str(), fs::absolute(dir).c_str());
  std::fflush(stdout);
  Collector collector(dir, pid, clock_ns(CLOCK_MONOTONIC), clock_ns(CLOCK_REALTIME), *control, options,
                      (library_dir() / "python").string() + "/", /*in_process=*/true);
  collector.loop();
  if (collector.traced() == 0) {
    if (!options.attached)  // memtrace attach says why itself
      std::fprintf(stderr, "memtrace: nothing recorded: the process made no CUDA call while recording\n");
    if (created) ::rmdir(dir.c_str());
  } else if (options.summary) {
    print_summary(collector.reports(), collector.snapshots(), dir);
  }
  return 0;
}

}  // namespace memtrace
