// What memtrace attach reads of a running process before it touches it: the modules mapped into it
// (/proc/PID/maps) and where their exported functions lie (each file's ELF dynamic symbols).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace memtrace::attach {

struct MappedModule {
  std::string path;                                 // as the process sees it
  uint64_t start = 0;                               // where the file's first page is mapped
  std::vector<std::pair<uint64_t, uint64_t>> code;  // its executable mappings [start, end)
};

// The modules mapped into PID, file-backed ones only; empty when /proc/PID/maps cannot be read.
std::vector<MappedModule> mapped_modules(int pid);

// The first module whose file name (the path's last part) begins with PREFIX.
const MappedModule* find_module(const std::vector<MappedModule>& modules, const std::string& prefix);

// The address in PID of the function NAME that MODULE's file exports (its default version where
// there are several); nullopt when it exports none. The file is read as PID sees it
// (/proc/PID/root), so a process in a container is read right.
std::optional<uint64_t> exported_function(int pid, const MappedModule& module, const std::string& name);

}  // namespace memtrace::attach
