// One memtrace subcommand: its CLI11 sub-app (options bound to its own state) and what running it
// does. Each command lives in a file of its own (cli/*_command.cpp).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <vector>

namespace memtrace::cli {

struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

Command add_run_command(CLI::App& app);
Command add_report_command(CLI::App& app);
Command add_snapshot_command(CLI::App& app);
Command add_export_command(CLI::App& app);
Command add_peak_command(CLI::App& app);
Command add_leaks_command(CLI::App& app);
Command add_frag_command(CLI::App& app);
Command add_timeline_command(CLI::App& app);
Command add_diff_command(CLI::App& app);
Command add_check_command(CLI::App& app);
Command add_estimate_command(CLI::App& app);
Command add_whatif_command(CLI::App& app);
Command add_explain_command(CLI::App& app);
Command add_verify_command(CLI::App& app);
Command add_html_command(CLI::App& app);
Command add_attach_command(CLI::App& app);
Command add_detach_command(CLI::App& app);
Command add_summarize_command(CLI::App& app);
Command add_record_command(CLI::App& app);  // hidden: memtrace.record's collector

// Groups the commands in `memtrace --help` and ends each command's help with an example.
void add_help_guide(CLI::App& app, const std::vector<Command>& commands);

}  // namespace memtrace::cli
