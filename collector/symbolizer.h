// Native frames to function, source file and line, with elfutils (libdw), outside the traced
// process. One address can give several frames: the functions inlined at it, innermost first,
// then the function they were inlined into. Shared by the workers of all traced processes (one
// at a time: libdw's sessions are not thread-safe); cached per address.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace memtrace {

struct SourceFrame {
  std::string function;  // demangled; empty when the module has no symbol for the address
  std::string file;      // empty when there is no line information
  uint32_t line = 0;
  bool inlined = false;  // inlined into the next frame
};

class Symbolizer {
 public:
  Symbolizer();
  ~Symbolizer();
  // The frames at ELF virtual address VADDR of the module at PATH (a return address: the call
  // before it is what is looked up). Empty when the module cannot be read. The answer stays
  // valid and unchanged for the symbolizer's life.
  const std::vector<SourceFrame>& symbolize(const std::string& path, uint64_t vaddr);

 private:
  struct Module;
  Module* module(const std::string& path);
  std::mutex mutex_;
  std::map<std::string, std::unique_ptr<Module>> modules_;
  std::unordered_map<std::string, std::unordered_map<uint64_t, std::vector<SourceFrame>>> cache_;
};

}  // namespace memtrace
