// The files the simulated device writes for tests (its ledger, the driver's requests, the
// runtime's driver table) are named by an environment variable in which `%p` stands for the pid,
// so that every process of a run writes its own.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <string>

namespace sim {

// The path the variable NAME gives, `%p` replaced by this process's pid; empty when it is not set.
inline std::string path_from_environment(const char* name) {
  const char* pattern = ::secure_getenv(name);
  if (!pattern || !*pattern) return {};
  std::string path;
  for (const char* p = pattern; *p; ++p) {
    if (p[0] == '%' && p[1] == 'p') {
      path += std::to_string(::getpid());
      ++p;
    } else {
      path += *p;
    }
  }
  return path;
}

}  // namespace sim
