#include "options.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <regex>

namespace memtrace::cli {

void add_by_option(CLI::App* cmd, std::string& by) {
  cmd->add_option("--by", by,
                  "Group sites by: user (the innermost frame of your code, Python if any; default), python, "
                  "native, stack, api")
      ->check(CLI::IsMember({"user", "python", "native", "stack", "api"}));
}

void add_analysis_options(CLI::App* cmd, AnalysisCli& a, bool sites) {
  cmd->add_option("path", a.path, "An output folder (all its processes) or one .memtrace file")->required();
  cmd->add_flag("--json", a.json, "Print JSON instead of text");
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
                            : SiteGrouping::kUser;
}

bool load_analyses(const char* command, AnalysisCli& a, std::vector<ProcessAnalysis>& out) {
  a.options.grouping = grouping_named(a.by);
  if (!a.step.empty()) {
    try {
      std::regex check(a.step);
    } catch (const std::regex_error& e) {
      std::fprintf(stderr, "memtrace %s: --step: '%s' is not a regular expression: %s\n", command, a.step.c_str(),
                   e.what());
      return false;
    }
    a.options.step_pattern = a.step;
  }
  std::vector<std::string> warnings;
  std::string error;
  bool ok = analyze_path(a.path, a.options, out, warnings, error);
  for (const auto& w : warnings) std::fprintf(stderr, "memtrace %s: %s\n", command, w.c_str());
  if (!ok) std::fprintf(stderr, "memtrace %s: %s\n", command, error.c_str());
  return ok;
}

void print(bool json, const nlohmann::json& doc, const std::string& text) {
  if (json)
    std::printf("%s\n", doc.dump(2).c_str());
  else
    std::fputs(text.c_str(), stdout);
}

bool write_new_file(const char* command, const std::string& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "wxe");
  if (!f) {
    std::fprintf(stderr, "memtrace %s: cannot create %s: %s\n", command, path.c_str(), std::strerror(errno));
    return false;
  }
  bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  ok &= std::fclose(f) == 0;
  if (!ok) std::fprintf(stderr, "memtrace %s: cannot write %s\n", command, path.c_str());
  return ok;
}

}  // namespace memtrace::cli
