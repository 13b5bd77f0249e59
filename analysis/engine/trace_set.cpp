#include "memtrace/engine/trace_set.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <locale>
#include <mutex>
#include <new>
#include <stdexcept>
#include <system_error>
#include <thread>

#include "memtrace/engine/process_analysis.h"
#include "memtrace/engine/summary.h"
#include "memtrace/format/chunk_channel.h"
#include "memtrace/format/run_folder.h"
#include "memtrace/importers/pickle.h"
#include "memtrace/importers/torch_snapshot.h"

namespace memtrace {

namespace fs = std::filesystem;

namespace {

// The file's bytes, mapped: pages the reader is done with go back to the page cache, so that a
// snapshot of any size is read in little memory.
class MappedFile {
 public:
  bool open(const std::string& path, std::string& error) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st {};
    if (fd < 0 || ::fstat(fd, &st) != 0) {
      error = "cannot read " + path + ": " + std::strerror(errno);
      if (fd >= 0) ::close(fd);
      return false;
    }
    size_ = static_cast<size_t>(st.st_size);
    if (size_ > 0) {
      void* at = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (at == MAP_FAILED) {
        error = "cannot read " + path + ": " + std::strerror(errno);
        ::close(fd);
        return false;
      }
      data_ = static_cast<char*>(at);
      ::madvise(data_, size_, MADV_SEQUENTIAL);
    }
    ::close(fd);
    return true;
  }
  ~MappedFile() {
    if (data_) ::munmap(data_, size_);
  }
  std::string_view bytes() const { return {data_, size_}; }
  // Lets the pages wholly inside [BEGIN, END) go: read again, they come back from the file.
  void release(size_t begin, size_t end) const {
    const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    begin = (begin + page - 1) / page * page;
    end = std::min(end, size_) / page * page;
    if (data_ && begin < end) ::madvise(data_ + begin, end - begin, MADV_DONTNEED);
  }

 private:
  char* data_ = nullptr;
  size_t size_ = 0;
};

// A PyTorch snapshot becomes a trace handed to its reader in this process (a ChunkChannel), by a
// thread of its own, while it is read as any trace is: the import and the analysis run at once,
// and the trace is never whole in memory. What keeps the snapshot from being imported is found
// before the thread starts.
std::unique_ptr<TraceReader> open_torch_snapshot(const std::string& path, std::string& error) {
  struct Import {
    std::string path;  // the import names it, from its thread, after the caller's may be gone
    MappedFile file;
    std::unique_ptr<TraceWriter> writer;
    std::unique_ptr<TorchSnapshotImport> import;
    std::thread thread;
    bool written = false;
    bool out_of_memory = false;
  };
  auto state = std::make_shared<Import>();
  state->path = path;
  if (!state->file.open(path, error)) return nullptr;
  auto channel = std::make_shared<ChunkChannel>();
  state->writer = TraceWriter::create_on(channel, path, error);
  if (!state->writer) return nullptr;
  Import* s = state.get();
  s->import = std::make_unique<TorchSnapshotImport>(
      s->file.bytes(), s->path, *s->writer, [s](size_t begin, size_t end) { s->file.release(begin, end); },
      usable_cores());
  if (!s->import->check()) {
    error = s->import->error();
    return nullptr;
  }
  s->thread = std::thread([s] {
    try {
      s->written = s->import->write();
    } catch (const std::bad_alloc&) {
      s->out_of_memory = true;  // said as the import's problem
    } catch (const std::length_error&) {
      s->out_of_memory = true;
    }
    s->writer.reset();  // the end of the trace, for the reader
  });
  auto finish = [state]() -> std::string {
    if (state->thread.joinable()) state->thread.join();
    if (state->out_of_memory)  // said, not thrown: this runs in the reader's destructor too
      return "out of memory importing the snapshot: it needs more memory than this machine gives memtrace";
    return state->written ? std::string() : state->import->error();
  };
  std::unique_ptr<TraceReader> reader = TraceReader::open(channel, path, error);
  if (!reader) {
    std::string problem = finish();  // the reader closed the channel: the writer stops
    if (!problem.empty()) error = problem;
    return nullptr;
  }
  reader->read_while_written(finish);
  return reader;
}

// Whether the file at PATH is a summary (memtrace summarize), read in its trace's place.
bool is_summary_file(const std::string& path) {
  char head[8] = {};
  std::ifstream in(path, std::ios::binary);
  return in.read(head, sizeof head) && is_summary_header(std::string_view(head, sizeof head));
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
  if (is_summary_header(std::string_view(head, sizeof head))) {
    error = path + " is a summary of a trace (memtrace summarize): this needs the events, in the trace itself";
    return nullptr;
  }
  std::unique_ptr<TraceReader> reader = TraceReader::open(path, error);
  if (!reader && !run_folder::is_memtrace_header(std::string_view(head, sizeof head)))
    error += ", nor a PyTorch memory snapshot (a pickle)";
  return reader;
}

unsigned usable_cores() {
  cpu_set_t set;
  if (::sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return std::max(1u, std::thread::hardware_concurrency());
}

namespace {

// libstdc++ fills std::ctype<char>'s narrow() cache one character at a time, from whichever thread
// asks (bits/locale_facets.h, GCC 12: ctype<char>::narrow(char, char)), and every std::regex
// compiled narrows its pattern: workers compiling one each (the step pattern) write it at once
// (ThreadSanitizer says so). The range narrow() fills the whole cache first (_M_narrow_init);
// done before any worker starts, the workers only read it.
void fill_narrow_cache() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char from[1] = {'a'};
    char to[1];
    std::use_facet<std::ctype<char>>(std::locale()).narrow(from, from + 1, '?', to);
  });
}

}  // namespace

size_t for_each_on_cores(size_t count, unsigned jobs, const std::function<bool(size_t)>& work) {
  std::atomic<size_t> next{0};
  std::atomic<size_t> first_failed{count};  // nothing after one that failed is begun
  std::mutex thrown_mutex;
  std::exception_ptr thrown;  // out of memory on a worker: thrown again on the caller's thread
  auto worker = [&] {
    for (size_t i; (i = next.fetch_add(1)) < count;) {
      if (i > first_failed.load()) break;
      bool done = false;
      try {
        done = work(i);
      } catch (const std::bad_alloc&) {
        std::lock_guard<std::mutex> lock(thrown_mutex);
        if (!thrown) thrown = std::current_exception();
      } catch (const std::length_error&) {  // a size past what a vector can be: out of memory too
        std::lock_guard<std::mutex> lock(thrown_mutex);
        if (!thrown) thrown = std::current_exception();
      }
      if (done) continue;
      for (size_t failed = first_failed.load(); i < failed && !first_failed.compare_exchange_weak(failed, i);) {
      }
    }
  };
  if (jobs == 0) jobs = usable_cores();
  jobs = static_cast<unsigned>(std::min<size_t>(jobs, count));
  if (jobs > 1) fill_narrow_cache();
  std::vector<std::thread> workers;
  for (unsigned w = 1; w < jobs; ++w) workers.emplace_back(worker);
  worker();
  for (std::thread& t : workers) t.join();
  if (thrown) std::rethrow_exception(thrown);
  return first_failed.load();
}

bool analyze_path(const std::string& path, const AnalysisOptions& options, unsigned jobs,
                  std::vector<ProcessAnalysis>& out, std::vector<std::string>& warnings, std::string& error) {
  std::vector<std::string> traces = run_folder::find_traces_and_summaries(path, error);
  if (traces.empty()) return false;
  // Each worker takes the next trace not yet taken. A worker's memory is one process's replay at a
  // time; the analyses it leaves are what the commands show, kept as one by one.
  struct Result {
    ProcessAnalysis analysis;
    std::string error;
  };
  std::vector<Result> results(traces.size());
  size_t failed = for_each_on_cores(traces.size(), jobs, [&](size_t i) {
    Result& r = results[i];
    return is_summary_file(traces[i]) ? read_summary(traces[i], options, r.analysis, r.error)
                                      : analyze_process(traces[i], options, r.analysis, r.error);
  });
  if (failed < traces.size()) {
    error = results[failed].error;
    return false;
  }
  size_t first = out.size();
  for (size_t i = 0; i < traces.size(); ++i) {
    ProcessAnalysis& p = results[i].analysis;
    if (!p.report.complete) warnings.push_back(traces[i] + ": " + p.report.problem);
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
