// Starting the program to trace: its environment, and the exit codes for when it cannot start.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace memtrace {

// Exit codes of `memtrace run` itself, as env(1) and timeout(1) use them.
inline constexpr int kExitMemtraceFailed = 125;
inline constexpr int kExitCannotExecute = 126;
inline constexpr int kExitNotFound = 127;

// Starts ARGV with ENVIRONMENT ("NAME=value" strings). Returns its pid; on failure -1, with
// ERROR saying why in one sentence and EXIT_CODE set to 126 or 127.
pid_t launch(const std::vector<std::string>& argv, const std::vector<std::string>& environment, std::string& error,
             int& exit_code);

// The current environment with NAME set to VALUE (replacing it), or VALUE put in front of the
// existing colon-separated list when PREPEND.
void set_env(std::vector<std::string>& environment, const std::string& name, const std::string& value,
             bool prepend = false);

}  // namespace memtrace
