// The memtrace executable: every subcommand in one program, each in a file of its own.
#include <malloc.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "command.h"
#include "memtrace/collector/run.h"
#include "options.h"

namespace {

// How many single-letter edits turn A into B.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The one of CANDIDATES nearest to NAME, when it is near enough to be what was meant.
std::string did_you_mean(const std::string& name, const std::vector<std::string>& candidates) {
  std::string nearest;
  size_t best = SIZE_MAX;
  for (const std::string& candidate : candidates) {
    size_t d = edit_distance(name, candidate);
    if (d < best) {
      best = d;
      nearest = candidate;
    }
  }
  return best <= std::max<size_t>(2, name.size() / 3) ? nearest : std::string();
}

// "'reprot' is not a memtrace command; did you mean report?" and the commands there are.
int unknown_command(const std::string& name, const std::vector<memtrace::cli::Command>& commands) {
  std::vector<std::string> names;
  std::string all;
  for (const auto& c : commands) {
    const std::string& candidate = c.app->get_name();
    if (candidate[0] == '_') continue;  // hidden
    all += (all.empty() ? "" : ", ") + candidate;
    names.push_back(candidate);
  }
  std::fprintf(stderr, "memtrace: '%s' is not a memtrace command", name.c_str());
  std::string nearest = did_you_mean(name, names);
  if (!nearest.empty()) std::fprintf(stderr, "; did you mean '%s'?", nearest.c_str());
  std::fprintf(stderr, "\nthe commands: %s (memtrace --help says more)\n", all.c_str());
  return memtrace::cli::kExitUsage;
}

// The first --option in ARGS that COMMAND does not know, with the option of COMMAND nearest to it:
// {"--max-peek", "--max-peak"}. Not past a lone --, nor, for memtrace run, past the program's name:
// what follows is the program's.
std::pair<std::string, std::string> unknown_option(CLI::App& command, int argc, char** argv) {
  std::vector<std::string> known;
  for (const CLI::Option* option : command.get_options())
    for (const std::string& name : option->get_lnames()) known.push_back("--" + name);
  const bool program_follows = command.get_name() == "run";
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") break;
    if (arg[0] != '-') {
      if (program_follows) break;
      continue;
    }
    if (arg.rfind("--", 0) != 0) continue;
    const bool inline_value = arg.find('=') != std::string::npos;
    arg = arg.substr(0, arg.find('='));
    if (std::find(known.begin(), known.end(), arg) == known.end()) return {arg, did_you_mean(arg, known)};
    const CLI::Option* option = command.get_option_no_throw(arg);
    if (option && option->get_items_expected_min() > 0 && !inline_value) ++i;  // its value
  }
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  using namespace memtrace::cli;
  // Freed memory is kept for the next use rather than handed back to the system and faulted in
  // again: each process of a folder analysed, each batch of a ring copied, each chunk read takes
  // megabytes and frees them, and a fresh page costs a page fault (~0.2 us on bare metal, ~10 us on
  // virtual machines whose page tables the host keeps: a 32-trace folder's analysis went from 1.52
  // to 0.72 s on one core there). A traced program never runs with these: exec resets them.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's largest
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  CLI::App app{
      "memtrace: a GPU memory profiler for CUDA programs.\n"
      "Record with `memtrace run -- CMD`, then read the traces with `memtrace report`."};
  app.name("memtrace");  // in help and usage lines, whatever path it was run by
  app.set_version_flag("--version", "memtrace " MEMTRACE_VERSION);
  app.require_subcommand(1);
  const std::vector<Command> commands = {
      // in the order --help lists them, by group (help_guide.cpp)
      add_run_command(app),      add_attach_command(app),    add_detach_command(app),   add_report_command(app),
      add_snapshot_command(app), add_peak_command(app),      add_leaks_command(app),    add_frag_command(app),
      add_whatif_command(app),   add_timeline_command(app),  add_estimate_command(app), add_explain_command(app),
      add_diff_command(app),     add_check_command(app),     add_verify_command(app),   add_html_command(app),
      add_export_command(app),   add_summarize_command(app), add_record_command(app),
  };
  add_help_guide(app, commands);
  if (argc < 2) {  // nothing asked: what there is to ask
    std::fprintf(stderr, "%s", app.help().c_str());
    return kExitUsage;
  }
  // The command asked for: the first argument, unless it is an option (--help, --version).
  const Command* chosen = nullptr;
  if (argc > 1 && argv[1][0] != '-') {
    for (const Command& c : commands)
      if (c.app->get_name() == argv[1]) chosen = &c;
    if (!chosen) return unknown_command(argv[1], commands);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    // One line for what was wrong, and the usage line of the command it was for.
    auto [unknown, nearest] = chosen ? unknown_option(*chosen->app, argc, argv) : std::pair<std::string, std::string>();
    if (!unknown.empty() && !nearest.empty())
      std::fprintf(stderr, "memtrace %s: %s is not an option of memtrace %s; did you mean %s?\n",
                   chosen->app->get_name().c_str(), unknown.c_str(), chosen->app->get_name().c_str(), nearest.c_str());
    else
      std::fprintf(stderr, "memtrace%s%s: %s\n", chosen ? " " : "", chosen ? chosen->app->get_name().c_str() : "",
                   e.what());
    if (chosen) {
      std::string help = chosen->app->help(), usage = "Usage: ";
      size_t at = help.find(usage);
      if (at != std::string::npos) {
        std::string line = help.substr(at + usage.size(), help.find('\n', at) - at - usage.size());
        size_t name = line.find(chosen->app->get_name() + " ");  // after the path memtrace was run by, if any
        line = "memtrace " + (name == std::string::npos ? line : line.substr(name));
        std::fprintf(stderr, "usage: %s\n", line.c_str());
      }
      std::fprintf(stderr, "(memtrace %s --help says more)\n", chosen->app->get_name().c_str());
    } else {
      std::fprintf(stderr, "(memtrace --help says more)\n");
    }
    // memtrace run's own failures must not read as the program's exit status.
    return chosen == &commands.front() ? memtrace::kExitMemtraceFailedCode : kExitUsage;
  }
  for (const Command& c : commands) {
    if (!*c.app) continue;
    if (const CLI::Option* path = c.app->get_option_no_throw("path"); path && path->count() > 0)
      report_files_from(path->as<std::string>());
    try {
      return c.run();
    } catch (const std::exception& e) {
      if (!dynamic_cast<const std::bad_alloc*>(&e) && !dynamic_cast<const std::length_error*>(&e)) throw;
      // A file that asks for more than the machine has, past the readers' bounds (or a size past
      // what a vector can be): one line, not an abort.
      std::fprintf(stderr,
                   "memtrace %s: out of memory: what it read needs more memory than this machine gives it (free "
                   "some, or read fewer traces at once)\n",
                   c.app->get_name().c_str());
      return &c == &commands.front() ? memtrace::kExitMemtraceFailedCode : kExitUsage;
    }
  }
  return kExitUsage;
}
