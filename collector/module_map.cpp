#include "module_map.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

namespace memtrace {

bool ModuleMap::lookup(uint64_t address, std::string& module, uint64_t& offset) const {
  auto it =
      std::upper_bound(ranges_.begin(), ranges_.end(), address, [](uint64_t a, const Range& r) { return a < r.start; });
  if (it == ranges_.begin()) return false;
  --it;
  if (address >= it->end) return false;
  module = it->path;
  offset = address - it->base;
  return true;
}

bool ModuleMap::resolve(uint64_t address, std::string& module, uint64_t& offset) {
  if (lookup(address, module, offset)) return true;
  reload();  // a library loaded since we last looked
  return lookup(address, module, offset);
}

void ModuleMap::reload() {
  std::ifstream maps("/proc/" + std::to_string(pid_) + "/maps");
  if (!maps) return;
  std::vector<Range> ranges;
  std::map<std::string, uint64_t> bases;  // a file's load base: its mapping at file offset 0
  std::string line;
  while (std::getline(maps, line)) {
    std::istringstream in(line);
    std::string span, perms, file_offset, dev, inode, path;
    in >> span >> perms >> file_offset >> dev >> inode;
    std::getline(in >> std::ws, path);
    if (path.empty() || path[0] != '/') continue;
    size_t dash = span.find('-');
    uint64_t start = std::stoull(span.substr(0, dash), nullptr, 16);
    uint64_t end = std::stoull(span.substr(dash + 1), nullptr, 16);
    uint64_t off = std::stoull(file_offset, nullptr, 16);
    auto [it, fresh] = bases.try_emplace(path, start - off);
    if (!fresh) it->second = std::min(it->second, start - off);
    if (perms.size() > 2 && perms[2] == 'x') ranges.push_back(Range{start, end, 0, path});
  }
  for (Range& r : ranges) r.base = bases[r.path];
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.start < b.start; });
  ranges_ = std::move(ranges);
}

}  // namespace memtrace
