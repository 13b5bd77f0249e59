// memtrace html PATH [-o FILE]: one self-contained page with the run's memory over time, the
// largest allocations, the flame graph at the peak, the top sites, growth, fragmentation and
// out-of-memory failures. A run of several processes (a job) gets the job page, and each process
// its own page in a folder beside it.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <set>

#include "command.h"
#include "memtrace/engine/summary.h"
#include "memtrace/engine/trace_set.h"
#include "memtrace/exports/html_report.h"
#include "memtrace/format/run_folder.h"
#include "options.h"

namespace memtrace::cli {

namespace {

// What a page draws, its fragmentation finding with the peak `memtrace whatif` predicts with
// expandable segments, as `frag` gives it.
nlohmann::json page_data(const std::vector<ProcessAnalysis>& processes) {
  nlohmann::json data = html_data(processes);
  for (size_t i = 0; i < processes.size(); ++i)
    for (nlohmann::json& finding : data["processes"][i]["findings"])
      if (finding["kind"] == "fragmentation") {
        std::string text = finding["text"];
        predict_expandable_segments(processes[i], text);
        finding["text"] = text;
      }
  return data;
}

struct HtmlCli {
  AnalysisCli analysis;
  std::string output = "memtrace-report.html";
  size_t largest = HtmlOptions().largest_allocations;
};

// Where the pages of a job's processes go: a folder beside the job page, named after it.
std::string pages_folder(const std::string& output) {
  std::string stem = output;
  if (stem.size() > 5 && stem.compare(stem.size() - 5, 5, ".html") == 0) stem.resize(stem.size() - 5);
  return stem + "-processes";
}

// A page's file name for process P, unique in the folder.
std::string page_name(const ProcessAnalysis& p, std::set<std::string>& taken) {
  char name[64];
  if (p.report.rank)
    std::snprintf(name, sizeof name, "rank-%05d", *p.report.rank);
  else
    std::snprintf(name, sizeof name, "process-%d", p.report.pid);
  std::string base = name, chosen = base + ".html";
  for (int n = 2; !taken.insert(chosen).second; ++n) chosen = base + "-" + std::to_string(n) + ".html";
  return chosen;
}

// Several processes: the job page, and each process's own page in a folder beside it (one process
// analysed at a time per core, so memory stays one process's per worker at any number of ranks).
int write_job(HtmlCli& c, std::vector<ProcessAnalysis>& processes, const AnalysisOptions& page_options) {
  std::vector<std::string> pages(processes.size());
  size_t without = 0;
  std::string why_without;  // the first process's reason
  if (c.output != "-") {
    const std::string folder = pages_folder(c.output);
    if (!make_report_folder("html", folder)) return 1;  // beside the page: its folder must be there
    std::set<std::string> taken;
    std::vector<std::string> names;
    for (const ProcessAnalysis& p : processes) names.push_back(page_name(p, taken));
    const std::string job_name = std::filesystem::path(c.output).filename().string();
    std::vector<std::string> errors(processes.size());
    std::vector<char> written(processes.size(), 0);
    size_t failed = for_each_on_cores(processes.size(), c.analysis.jobs, [&](size_t i) {
      // A summary made without --html has no page of its own: the job page says so; a trace always has.
      const std::string& trace = processes[i].report.trace_path;
      const bool from_summary = !std::filesystem::exists(trace) && std::filesystem::exists(summary_path_of(trace));
      ProcessAnalysis full;
      bool ok = from_summary ? read_summary(summary_path_of(trace), page_options, full, errors[i])
                             : analyze_process(trace, page_options, full, errors[i]);
      if (!ok) return from_summary;
      nlohmann::json data = page_data({full});
      data["job"] = {{"page", "../" + job_name}, {"processes", processes.size()}};
      if (!write_report_file("html", folder + "/" + names[i], html_page(data))) return false;
      written[i] = 1;
      return true;
    });
    if (failed < processes.size()) {
      if (!errors[failed].empty()) std::fprintf(stderr, "memtrace html: %s\n", errors[failed].c_str());
      return 1;
    }
    const std::string relative = std::filesystem::path(folder).filename().string();
    for (size_t i = 0; i < processes.size(); ++i) {
      if (written[i]) {
        pages[i] = relative + "/" + names[i];
      } else {
        if (!without++) why_without = errors[i];
      }
    }
  }
  if (!write_report_file("html", c.output, job_page(job_data(processes, pages)))) return 1;
  if (c.output != "-")
    std::fprintf(stderr, "memtrace html: wrote %s (the job: %zu processes) and their pages in %s/\n", c.output.c_str(),
                 processes.size(), pages_folder(c.output).c_str());
  else
    std::fprintf(stderr, "memtrace html: the job page only: each process's page is written beside it with -o FILE\n");
  if (without)
    std::fprintf(stderr, "memtrace html: %zu processes have no page of their own (the first: %s)\n", without,
                 why_without.c_str());
  return 0;
}

int write_html(HtmlCli& c) {
  if (!html_report_available()) {
    std::fprintf(stderr,
                 "memtrace html: this memtrace was built without uPlot, which every page carries: run scripts/setup "
                 "(npm ci in analysis/exports/html) and build again\n");
    return 1;
  }
  HtmlOptions options;
  options.largest_allocations = c.largest;
  const AnalysisOptions page_options = html_analysis_options(options);
  std::vector<ProcessAnalysis> processes;
  std::string error;
  if (run_folder::find_traces_and_summaries(c.analysis.path, error).size() > 1) {
    // The job page needs little of each process (its peaks and timeline); each process's page
    // is made after, one at a time per core.
    c.analysis.options.timeline = true;
    if (!load_analyses("html", c.analysis, processes)) return kExitUsage;
    return write_job(c, processes, page_options);
  }
  c.analysis.options = page_options;
  c.analysis.by = "stack";  // the flame graph's stacks; the sites are named as everywhere else
  if (!load_analyses("html", c.analysis, processes)) return kExitUsage;
  if (!write_report_file("html", c.output, html_page(page_data(processes)))) return 1;
  if (c.output != "-") std::fprintf(stderr, "memtrace html: wrote %s\n", c.output.c_str());
  return 0;
}

}  // namespace

Command add_html_command(CLI::App& app) {
  auto c = std::make_shared<HtmlCli>();
  CLI::App* cmd = app.add_subcommand(
      "html",
      "Write one HTML page to explore the run in a browser (fetches nothing); for several processes, the job's "
      "page and each process's own page in a folder beside it");
  cmd->add_option("path", c->analysis.path, kRunPathHelp)->required();
  cmd->add_option("-o,--output", c->output,
                  "The page to write (default: memtrace-report.html; - for standard output); a job's processes' "
                  "pages go in the folder named after it (memtrace-report-processes/)");
  cmd->add_option("--largest", c->largest,
                  "How many of the largest allocations the page draws one by one (default 20000; the rest are in "
                  "the totals)")
      ->check(CLI::Range(size_t(0), size_t(1) << 24));
  cmd->add_option("--step", c->analysis.step,
                  "A regular expression the whole name of a step's NVTX mark or range matches (default: memtrace's "
                  "and PyTorch's optimizer steps)");
  add_jobs_option(cmd, c->analysis.jobs);
  return {cmd, [c] { return write_html(*c); }};
}

}  // namespace memtrace::cli
