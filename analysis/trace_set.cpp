#include "memtrace/analysis/trace_set.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "memtrace/analysis/process_analysis.h"

namespace memtrace {

namespace fs = std::filesystem;

std::vector<std::string> find_traces(const std::string& path, std::string& error) {
  std::error_code ec;
  fs::file_status status = fs::status(path, ec);
  if (ec || !fs::exists(status)) {
    error = path + " does not exist";
    return {};
  }
  if (!fs::is_directory(status)) return {path};
  std::vector<std::string> traces;
  for (const auto& entry : fs::directory_iterator(path, ec))
    if (entry.path().extension() == ".memtrace" && entry.is_regular_file()) traces.push_back(entry.path().string());
  if (ec) {
    error = "cannot read folder " + path + ": " + ec.message();
    return {};
  }
  if (traces.empty()) error = "no .memtrace traces in " + path + " (did the program use CUDA?)";
  std::sort(traces.begin(), traces.end());
  return traces;
}

bool analyze_path(const std::string& path, const AnalysisOptions& options, std::vector<ProcessAnalysis>& out,
                  std::vector<std::string>& warnings, std::string& error) {
  std::vector<std::string> traces = find_traces(path, error);
  if (traces.empty()) return false;
  for (const auto& trace : traces) {
    ProcessAnalysis p;
    if (!analyze_process(trace, options, p, error)) return false;
    if (!p.report.complete) warnings.push_back(trace + ": " + p.report.problem);
    out.push_back(std::move(p));
  }
  return true;
}

}  // namespace memtrace
