// Turns a return address in a traced process into "module + offset" by reading the process's
// memory map, so a site means something after the process is gone.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace memtrace {

class ModuleMap {
 public:
  // Reads the map now, while the process is known to be alive (it is waiting for our welcome).
  explicit ModuleMap(int pid) : pid_(pid) { reload(); }
  // The module holding ADDRESS and the address's offset from the module's load base.
  bool resolve(uint64_t address, std::string& module, uint64_t& offset);

 private:
  struct Range {
    uint64_t start, end, base;
    std::string path;
  };
  bool lookup(uint64_t address, std::string& module, uint64_t& offset) const;
  void reload();

  int pid_;
  std::vector<Range> ranges_;
};

}  // namespace memtrace
