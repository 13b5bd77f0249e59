#include "process_state.h"

#include <signal.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace memtrace {

std::optional<ProcessIds> process_ids(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::optional<uid_t> uid;
  std::optional<gid_t> gid;
  for (std::string line; std::getline(in, line);) {
    unsigned real, effective;  // "Uid:\treal\teffective\tsaved\tfs"
    if (std::sscanf(line.c_str(), "Uid: %u %u", &real, &effective) == 2) uid = effective;
    if (std::sscanf(line.c_str(), "Gid: %u %u", &real, &effective) == 2) gid = effective;
  }
  if (!uid || !gid) return std::nullopt;
  return ProcessIds{*uid, *gid};
}

bool running(int pid) {
  if (::kill(pid, 0) != 0) return false;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(in, line);
  size_t close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z' && line[close + 2] != 'X';
}

}  // namespace memtrace
