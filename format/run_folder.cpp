#include "memtrace/format/run_folder.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "memtrace/format/framing.h"

namespace memtrace::run_folder {

namespace fs = std::filesystem;

std::string trace_name(const std::string& dir, int32_t pid, int image, int n) {
  return dir + "/" + std::to_string(pid) + (image ? "." + std::to_string(image) : "") +
         (n ? "-" + std::to_string(n) : "") + std::string(kTraceExtension);
}

std::string snapshot_name(const std::string& dir, const char* reason, int32_t pid, uint32_t n) {
  return dir + "/" + reason + "-" + std::to_string(pid) + (n ? "-" + std::to_string(n) : std::string()) +
         std::string(kSnapshotExtension);
}

std::string torch_history_name(const std::string& dir, int32_t pid, uint32_t n) {
  return dir + "/" + std::to_string(pid) + ".torch-history-" + std::to_string(n) + ".pickle";
}

bool is_memtrace_header(std::string_view head) {
  return head.size() >= sizeof framing::kMagic &&
         std::memcmp(head.data(), framing::kMagic, sizeof framing::kMagic) == 0;
}

bool is_memtrace_file(const std::string& path) {
  char head[sizeof framing::kMagic] = {};
  std::FILE* f = std::fopen(path.c_str(), "rbe");
  if (!f) return false;
  size_t got = std::fread(head, 1, sizeof head, f);
  std::fclose(f);
  return is_memtrace_header(std::string_view(head, got));
}

bool holds_traces(const std::string& dir) {
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec))
    if (entry.path().extension() == kTraceExtension) return true;
  return false;
}

namespace {

// The traces under PATH and, with SUMMARIES, the summaries without a trace beside them.
std::vector<std::string> find_in(const std::string& path, bool summaries, std::string& error) {
  std::error_code ec;
  fs::file_status status = fs::status(path, ec);
  if (ec || !fs::exists(status)) {
    error = path + " does not exist";
    return {};
  }
  if (!fs::is_directory(status)) return {path};
  std::vector<std::string> found;
  size_t summaries_seen = 0;
  for (auto it = fs::recursive_directory_iterator(path, fs::directory_options::skip_permission_denied, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_regular_file()) continue;
    const fs::path& file = it->path();
    if (file.extension() == kTraceExtension) {
      found.push_back(file.string());
    } else if (file.extension() == kSummaryExtension) {
      ++summaries_seen;
      fs::path trace = file;
      std::error_code exists_error;
      if (summaries && !fs::exists(trace.replace_extension(kTraceExtension), exists_error))
        found.push_back(file.string());
    }
  }
  if (ec) {
    error = "cannot read folder " + path + ": " + ec.message();
    return {};
  }
  if (found.empty())
    error = summaries_seen ? path +
                                 " holds summaries of traces only (memtrace summarize): this needs the events, in "
                                 "the traces themselves"
                           : "no .memtrace traces in " + path + " (did the program use CUDA?)";
  std::sort(found.begin(), found.end());
  return found;
}

}  // namespace

std::vector<std::string> find_traces(const std::string& path, std::string& error) {
  return find_in(path, false, error);
}

std::vector<std::string> find_traces_and_summaries(const std::string& path, std::string& error) {
  return find_in(path, true, error);
}

std::vector<std::string> find_snapshots(const std::string& path, std::string& error) {
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    error = path + " does not exist";
    return {};
  }
  if (!fs::is_directory(path, ec)) return {path};
  std::vector<std::string> found;
  for (const auto& entry : fs::directory_iterator(path, ec))
    if (entry.path().extension() == kSnapshotExtension && entry.is_regular_file())
      found.push_back(entry.path().string());
  std::sort(found.begin(), found.end());
  if (found.empty()) error = "no .memsnap snapshots in " + path;
  return found;
}

namespace {
fs::path folder_of(const std::string& trace_path) {
  fs::path folder = fs::path(trace_path).parent_path();
  return folder.empty() ? "." : folder;
}
}  // namespace

std::vector<std::string> snapshots_of(const std::string& trace_path, int32_t pid) {
  std::vector<std::string> out;
  std::error_code ec;
  const std::string tag = "-" + std::to_string(pid);
  for (const auto& entry : fs::directory_iterator(folder_of(trace_path), ec)) {
    std::string name = entry.path().filename().string();
    size_t at = name.find(tag);
    if (entry.path().extension() != kSnapshotExtension || at == std::string::npos) continue;
    char after = name[at + tag.size()];
    if (after == '-' || after == '.') out.push_back(entry.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> torch_history_of(const std::string& trace_path, int32_t pid) {
  std::vector<std::pair<long, std::string>> found;
  std::error_code ec;
  const std::string prefix = std::to_string(pid) + ".torch-history-";
  for (const auto& entry : fs::directory_iterator(folder_of(trace_path), ec)) {
    std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0 || entry.path().extension() != ".pickle") continue;
    found.emplace_back(std::atol(name.c_str() + prefix.size()), entry.path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& [n, path] : found) out.push_back(std::move(path));
  return out;
}

}  // namespace memtrace::run_folder
