#include "memtrace/engine/trace_set.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <system_error>

#include "memtrace/engine/process_analysis.h"
#include "memtrace/format/run_folder.h"
#include "memtrace/importers/pickle.h"
#include "memtrace/importers/torch_snapshot.h"

namespace memtrace {

namespace fs = std::filesystem;

namespace {

// A PyTorch snapshot becomes a trace in memory (a memfd), read back as any trace is.
std::unique_ptr<TraceReader> open_torch_snapshot(const std::string& path, std::string& error) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) {
    error = "cannot read " + path;
    return nullptr;
  }
  int fd = ::memfd_create("memtrace-torch-snapshot", MFD_CLOEXEC);
  int writer_fd = fd >= 0 ? ::dup(fd) : -1;
  if (writer_fd < 0) {
    error = "cannot read " + path + ": " + std::strerror(errno);
    if (fd >= 0) ::close(fd);
    return nullptr;
  }
  std::unique_ptr<TraceWriter> writer = TraceWriter::create_on(writer_fd, path, error);
  bool ok = writer && import_torch_snapshot(bytes, path, *writer, error);
  writer.reset();
  std::FILE* file = ok ? ::fdopen(fd, "rb") : nullptr;
  if (!file) {
    if (ok) error = "cannot read " + path + ": " + std::strerror(errno);
    ::close(fd);
    return nullptr;
  }
  return TraceReader::open(file, path, error);
}

}  // namespace

std::unique_ptr<TraceReader> open_trace(const std::string& path, std::string& error) {
  char head[8] = {};
  {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      error = "cannot open " + path + ": " + std::strerror(errno);
      return nullptr;
    }
    in.read(head, sizeof head);
  }
  if (pickle::looks_like_pickle(std::string_view(head, sizeof head))) return open_torch_snapshot(path, error);
  std::unique_ptr<TraceReader> reader = TraceReader::open(path, error);
  if (!reader && !run_folder::is_memtrace_header(std::string_view(head, sizeof head)))
    error += ", nor a PyTorch memory snapshot (a pickle)";
  return reader;
}

bool analyze_path(const std::string& path, const AnalysisOptions& options, std::vector<ProcessAnalysis>& out,
                  std::vector<std::string>& warnings, std::string& error) {
  std::vector<std::string> traces = run_folder::find_traces(path, error);
  if (traces.empty()) return false;
  size_t first = out.size();
  for (const auto& trace : traces) {
    ProcessAnalysis p;
    if (!analyze_process(trace, options, p, error)) return false;
    if (!p.report.complete) warnings.push_back(trace + ": " + p.report.problem);
    out.push_back(std::move(p));
  }
  // The ranks of a job in their order, the processes without one after them.
  std::stable_sort(out.begin() + static_cast<std::ptrdiff_t>(first), out.end(),
                   [](const ProcessAnalysis& a, const ProcessAnalysis& b) {
                     if (a.report.rank.has_value() != b.report.rank.has_value()) return a.report.rank.has_value();
                     return a.report.rank.value_or(0) < b.report.rank.value_or(0);
                   });
  return true;
}

}  // namespace memtrace
