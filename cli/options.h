// What the commands that read traces share: the path, --json, how sites group (--by, one list
// for every command), steps (--step), and the way they load, print and write.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "memtrace/engine/process_analysis.h"
#include "memtrace/engine/trace_set.h"
#include "memtrace/views/views.h"

namespace memtrace::cli {

// Every analysis command exits 0 with its answer, 1 when the answer is "no" (check's limits broken,
// verify's records disagreeing), and 2 when it cannot answer: a wrong command line, or input that
// is missing or cannot be read.
inline constexpr int kExitUsage = 2;

// What every command that reads a run takes as its path.
inline constexpr const char* kRunPathHelp =
    "An output folder (all its processes; a job's folder of nodes' folders), one .memtrace file, a trace's summary "
    "(.memsum: memtrace summarize), or a PyTorch memory snapshot (the .pickle torch.cuda.memory._dump_snapshot "
    "writes)";

struct AnalysisCli {
  std::string path, by = "user", step;
  bool json = false;
  unsigned jobs = 0;  // processes analysed at once; 0: one per core
  AnalysisOptions options;
};

// --by: user (default), python, native, stack, api.
void add_by_option(CLI::App* cmd, std::string& by);
// -j/--jobs: how many of a folder's processes are analysed at once.
void add_jobs_option(CLI::App* cmd, unsigned& jobs);
// The path, --json, --step and -j; with SITES also --top, --by and --keep-cuda-frames.
void add_analysis_options(CLI::App* cmd, AnalysisCli& a, bool sites = true);
SiteGrouping grouping_named(const std::string& name);

// Applies A's --by and --step to its options; prints why and returns false when they are wrong
// (and puts why in WHY, when given).
bool apply_analysis_cli(const char* command, AnalysisCli& a, std::string* why = nullptr);
// Analyzes what A names (its --by and --step applied to its options); prints why and returns
// false when it cannot (and puts why in WHY, when given).
bool load_analyses(const char* command, AnalysisCli& a, std::vector<ProcessAnalysis>& out, std::string* why = nullptr);

// Adds to ANSWER (frag's and the HTML page's "Would expandable_segments help?") what `memtrace
// whatif` predicts for P's run with it; nothing where ANSWER is empty or P's run had it on.
void predict_expandable_segments(const ProcessAnalysis& p, std::string& answer);

// Prints DOC (--json) or TEXT.
void print(bool json, const nlohmann::json& doc, const std::string& text);
// Prints a view (analysis/views.h): its JSON document with --json, else its text.
template <typename View>
void show(bool json, const View& view) {
  print(json, json ? to_json(view) : nlohmann::json(), json ? std::string() : to_text(view));
}
// Analyzes what A names, and shows what MAKE_VIEW makes of the analyses; 2 when they cannot be read.
template <typename MakeView>
int analyze_and_show(const char* command, AnalysisCli& a, MakeView&& make_view) {
  std::vector<ProcessAnalysis> processes;
  if (!load_analyses(command, a, processes)) return kExitUsage;
  show(a.json, make_view(processes));
  return 0;
}
// A report file (JUnit, CSV, SVG, an export) written as it is made: it replaces what is at its
// path, as pytest's --junitxml does, so that CI reruns work, but never a trace; written beside
// and renamed over, so a reader never sees half of one, and nothing is replaced unless commit()
// succeeds. The path "-" or "" is standard output; what is not a file (/dev/stdout, /dev/null, a
// pipe) is written in place.
class ReportFile {
 public:
  ReportFile() = default;
  ReportFile(const ReportFile&) = delete;
  ReportFile& operator=(const ReportFile&) = delete;
  ~ReportFile();
  // Where to write; null after saying why it cannot (COMMAND names memtrace's command).
  std::FILE* open(const char* command, const std::string& path);
  // Puts the file in its place; false after saying why.
  bool commit();

 private:
  const char* command_ = "";
  std::string path_, temporary_;
  std::FILE* file_ = nullptr;
  bool to_stdout_ = false;  // standard output, by "-" or by a path to where it goes
};
// TEXT as a report file at PATH. False after saying why.
bool write_report_file(const char* command, const std::string& path, const std::string& text);
// Report files hold what their input holds (command lines, paths, stacks): from now on none is
// more open than INPUT (a trace, or a run's folder, whose execute bits are left out), and none
// more than 0644 less the umask.
void report_files_from(const std::string& input);
// A folder for report files at PATH (the HTML page's process pages): made with the reports' mode
// (and execute where they read), or, when there, used only if it is the user's own, no link, and
// writable by no one else. False after saying why.
bool make_report_folder(const char* command, const std::string& path);

}  // namespace memtrace::cli
