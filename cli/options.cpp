#include "options.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <regex>

#include "memtrace/base/folder_trust.h"
#include "memtrace/format/framing.h"
#include "memtrace/format/run_folder.h"
#include "memtrace/whatif/whatif.h"

namespace memtrace::cli {

void add_by_option(CLI::App* cmd, std::string& by) {
  cmd->add_option("--by", by,
                  "Group sites by: user (the innermost frame of your code, Python if any, one site per function "
                  "of yours that called it; default), python, "
                  "native, stack, api, owner (the library whose code called CUDA: NCCL, cuBLAS, PyTorch, the "
                  "program; peak shows who held the whole device); peak also by category (PyTorch's parameters, "
                  "gradients, ...)")
      ->check(CLI::IsMember({"user", "python", "native", "stack", "api", "owner", "category"}));
}

void add_jobs_option(CLI::App* cmd, unsigned& jobs) {
  cmd->add_option("-j,--jobs", jobs,
                  "How many of a folder's processes to analyse at once (default: one per core; "
                  "the output is the same for any number)")
      ->check(CLI::Range(1u, 4096u));
}

void add_analysis_options(CLI::App* cmd, AnalysisCli& a, bool sites) {
  cmd->add_option("path", a.path, kRunPathHelp)->required();
  cmd->add_flag("--json", a.json, "Print JSON instead of text");
  add_jobs_option(cmd, a.jobs);
  cmd->add_option("--step", a.step,
                  "Regular expression naming the NVTX range or mark that starts a training step "
                  "(default: memtrace.step, or PyTorch's Optimizer.step#... ranges)");
  if (!sites) return;
  cmd->add_option("--top", a.options.top_sites, "How many sites to show (default 10)")->check(CLI::Range(1, 1000000));
  add_by_option(cmd, a.by);
  cmd->add_flag("--keep-cuda-frames", a.options.keep_cuda_frames, "Show frames inside the CUDA libraries");
}

SiteGrouping grouping_named(const std::string& name) {
  return name == "python"   ? SiteGrouping::kPython
         : name == "native" ? SiteGrouping::kNative
         : name == "stack"  ? SiteGrouping::kStack
         : name == "api"    ? SiteGrouping::kApi
         : name == "owner"  ? SiteGrouping::kOwner
                            : SiteGrouping::kUser;
}

bool apply_analysis_cli(const char* command, AnalysisCli& a, std::string* why) {
  if (a.by == "category" && std::string(command) != "peak") {
    std::fprintf(stderr, "memtrace %s: --by category: only memtrace peak groups by category\n", command);
    if (why) *why = "--by category: only memtrace peak groups by category";
    return false;
  }
  a.options.grouping = grouping_named(a.by);
  if (a.options.grouping == SiteGrouping::kOwner) a.options.owners = true;
  if (!a.step.empty()) {
    try {
      std::regex check(a.step);
    } catch (const std::regex_error& e) {
      std::fprintf(stderr, "memtrace %s: --step: '%s' is not a regular expression: %s\n", command, a.step.c_str(),
                   e.what());
      if (why) *why = "--step: '" + a.step + "' is not a regular expression";
      return false;
    }
    a.options.step_pattern = a.step;
  }
  return true;
}

bool load_analyses(const char* command, AnalysisCli& a, std::vector<ProcessAnalysis>& out, std::string* why) {
  if (!apply_analysis_cli(command, a, why)) return false;
  std::vector<std::string> warnings;
  std::string error;
  bool ok = analyze_path(a.path, a.options, a.jobs, out, warnings, error);
  for (const auto& w : warnings) std::fprintf(stderr, "memtrace %s: %s\n", command, w.c_str());
  if (!ok) std::fprintf(stderr, "memtrace %s: %s\n", command, error.c_str());
  if (!ok && why) *why = error;
  return ok;
}

void predict_expandable_segments(const ProcessAnalysis& p, std::string& answer) {
  if (answer.empty() || !p.pytorch || p.expandable_segments || p.report.trace_path.empty()) return;
  std::string predicted = whatif::expandable_segments_prediction(p.report.trace_path);
  if (!predicted.empty()) answer += " " + predicted;
}

void print(bool json, const nlohmann::json& doc, const std::string& text) {
  if (json)
    std::printf("%s\n", doc.dump(2).c_str());
  else
    std::fputs(text.c_str(), stdout);
}

namespace {

mode_t current_umask() {
  mode_t mask = ::umask(0);
  ::umask(mask);
  return mask;
}

mode_t g_report_mode = 0644;  // report_files_from's cap

}  // namespace

ReportFile::~ReportFile() {
  if (file_) {  // never committed: the file at its path stays as it was
    std::fclose(file_);
    if (!temporary_.empty()) ::unlink(temporary_.c_str());
  }
}

std::FILE* ReportFile::open(const char* command, const std::string& path) {
  command_ = command;
  path_ = path;
  to_stdout_ = true;
  if (path.empty() || path == "-") return stdout;
  // What is not a file (/dev/null, a pipe, a process substitution's /dev/fd/N) is written to as it
  // is (below); standard output by any name (/dev/stdout, a file it goes to) is standard output:
  // nothing read first (reading /dev/stdout inside $(...) waits on the pipe memtrace writes).
  struct stat st, out;
  bool exists = ::stat(path.c_str(), &st) == 0;
  if (exists && ::fstat(STDOUT_FILENO, &out) == 0 && st.st_dev == out.st_dev && st.st_ino == out.st_ino)
    return stdout;  // /dev/stdout, /dev/fd/1, or the file standard output goes to: one stream, in order
  to_stdout_ = false;
  // Written in place only what is there and is no file, named as such: under /dev or /proc, or a
  // pipe or device of the user's own at the path itself. A link to one (planted in a shared
  // folder: another user's FIFO, a disk) is replaced like any link, never written through; a new
  // or regular file (under /dev/shm too) is made beside and renamed.
  struct stat at;
  const bool link = ::lstat(path.c_str(), &at) == 0 && S_ISLNK(at.st_mode);
  const bool system_path = path.rfind("/dev/", 0) == 0 || path.rfind("/proc/", 0) == 0;
  if (exists && S_ISDIR(st.st_mode)) {
    std::fprintf(stderr, "memtrace %s: %s is a folder: give a file to write\n", command, path.c_str());
    return nullptr;
  }
  if (exists && !S_ISREG(st.st_mode) && (system_path || !link)) {
    if (!system_path && st.st_uid != ::geteuid()) {
      std::fprintf(stderr,
                   "memtrace %s: %s is another user's pipe or device: memtrace writes only into its user's own\n",
                   command, path.c_str());
      return nullptr;
    }
    file_ = std::fopen(path.c_str(), "w");
    if (!file_) std::fprintf(stderr, "memtrace %s: cannot write %s: %s\n", command, path.c_str(), std::strerror(errno));
    return file_;
  }
  if (exists && S_ISREG(st.st_mode) && run_folder::is_memtrace_file(path)) {
    std::fprintf(stderr, "memtrace %s: %s is a memtrace trace: it is not written over\n", command, path.c_str());
    return nullptr;
  }
  // Written beside it, then renamed over it: a reader never sees half a file, and a link at PATH
  // is replaced, not followed.
  temporary_ = path + ".memtrace-tmp-XXXXXX";
  int fd = ::mkstemp(temporary_.data());
  if (fd >= 0) ::fchmod(fd, g_report_mode & ~current_umask());
  file_ = fd >= 0 ? ::fdopen(fd, "w") : nullptr;
  if (!file_) {
    std::fprintf(stderr, "memtrace %s: cannot write %s: %s\n", command, path.c_str(), std::strerror(errno));
    if (fd >= 0) {
      ::close(fd);
      ::unlink(temporary_.c_str());
    }
  }
  return file_;
}

bool ReportFile::commit() {
  if (!file_) return to_stdout_ ? std::fflush(stdout) == 0 : false;
  bool ok = !std::ferror(file_);
  ok &= std::fclose(file_) == 0;
  file_ = nullptr;
  if (temporary_.empty()) {  // written in place (not a file)
    if (!ok) std::fprintf(stderr, "memtrace %s: cannot write %s: %s\n", command_, path_.c_str(), std::strerror(errno));
    return ok;
  }
  if (ok && ::rename(temporary_.c_str(), path_.c_str()) == 0) return true;
  std::fprintf(stderr, "memtrace %s: cannot write %s: %s\n", command_, path_.c_str(), std::strerror(errno));
  ::unlink(temporary_.c_str());
  return false;
}

bool write_report_file(const char* command, const std::string& path, const std::string& text) {
  ReportFile file;
  std::FILE* out = file.open(command, path);
  if (!out) return false;
  std::fwrite(text.data(), 1, text.size(), out);
  return file.commit();
}

void report_files_from(const std::string& input) {
  struct stat st;
  if (::stat(input.c_str(), &st) != 0) return;
  g_report_mode = 0644 & st.st_mode;
  if (!S_ISDIR(st.st_mode)) return;
  std::string error;  // a folder: as closed as the most closed of its traces and summaries
  for (const std::string& file : run_folder::find_traces_and_summaries(input, error))
    if (::stat(file.c_str(), &st) == 0) g_report_mode &= st.st_mode;
}

bool make_report_folder(const char* command, const std::string& path) {
  const mode_t files = g_report_mode & ~current_umask();
  if (::mkdir(path.c_str(), 0700) == 0) {  // made now: given its mode through itself, nothing followed
    int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    bool ok = fd >= 0 && ::fchmod(fd, 0700 | files | ((files & 0044) >> 2)) == 0;
    if (fd >= 0) ::close(fd);
    if (!ok) std::fprintf(stderr, "memtrace %s: cannot make %s: %s\n", command, path.c_str(), std::strerror(errno));
    return ok;
  }
  struct stat st;
  if (errno != EEXIST || ::lstat(path.c_str(), &st) != 0) {
    std::fprintf(stderr, "memtrace %s: cannot make %s: %s\n", command, path.c_str(), std::strerror(errno));
    return false;
  }
  const std::string why = S_ISDIR(st.st_mode) ? why_folder_is_not_private(st) : "is not a folder";
  if (!why.empty()) {
    std::fprintf(stderr,
                 "memtrace %s: %s %s: memtrace writes its pages only into a folder of the user's own that no one "
                 "else may write in (remove it, or choose another -o)\n",
                 command, path.c_str(), why.c_str());
    return false;
  }
  return true;
}

}  // namespace memtrace::cli
