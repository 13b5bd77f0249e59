#include "target_modules.h"

#include <elf.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>

namespace memtrace::attach {

std::vector<MappedModule> mapped_modules(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/maps");
  std::vector<MappedModule> modules;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string range, perms, offset_text, device, inode, path;
    fields >> range >> perms >> offset_text >> device >> inode;
    std::getline(fields >> std::ws, path);
    if (path.empty() || path[0] != '/') continue;  // anonymous memory, [stack], [vdso]
    uint64_t start = std::stoull(range.substr(0, range.find('-')), nullptr, 16);
    uint64_t end = std::stoull(range.substr(range.find('-') + 1), nullptr, 16);
    uint64_t offset = std::stoull(offset_text, nullptr, 16);
    auto it = std::find_if(modules.begin(), modules.end(), [&](const MappedModule& m) { return m.path == path; });
    if (it == modules.end()) {
      modules.push_back({path, 0, {}});
      it = modules.end() - 1;
    }
    if (offset == 0 && (it->start == 0 || start < it->start)) it->start = start;
    if (perms.size() > 2 && perms[2] == 'x') it->code.emplace_back(start, end);
  }
  return modules;
}

const MappedModule* find_module(const std::vector<MappedModule>& modules, const std::string& prefix) {
  for (const MappedModule& m : modules) {
    std::string name = m.path.substr(m.path.rfind('/') + 1);
    if (name.rfind(prefix, 0) == 0) return &m;
  }
  return nullptr;
}

namespace {

// The file as PID sees it; the path itself when its root is ours (or not readable).
std::string read_file(int pid, const std::string& path) {
  for (const std::string& candidate : {"/proc/" + std::to_string(pid) + "/root" + path, path}) {
    std::ifstream in(candidate, std::ios::binary);
    if (!in) continue;
    std::ostringstream bytes;
    bytes << in.rdbuf();
    return bytes.str();
  }
  return {};
}

template <typename T>
bool read_at(const std::string& file, uint64_t offset, T& out) {
  if (offset > file.size() || file.size() - offset < sizeof(T)) return false;
  std::memcpy(&out, file.data() + offset, sizeof(T));
  return true;
}

}  // namespace

std::optional<uint64_t> exported_function(int pid, const MappedModule& module, const std::string& name) {
  const std::string file = read_file(pid, module.path);
  Elf64_Ehdr eh;
  if (!read_at(file, 0, eh) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
      eh.e_shentsize != sizeof(Elf64_Shdr))
    return std::nullopt;
  // The load bias: where the first loadable segment's page is, against where the file puts it.
  uint64_t first_vaddr = UINT64_MAX;
  for (int i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph;
    if (read_at(file, eh.e_phoff + uint64_t(i) * eh.e_phentsize, ph) && ph.p_type == PT_LOAD && ph.p_offset == 0)
      first_vaddr = std::min<uint64_t>(first_vaddr, ph.p_vaddr & ~uint64_t(0xfff));
  }
  if (first_vaddr == UINT64_MAX || module.start == 0) return std::nullopt;
  const uint64_t bias = eh.e_type == ET_DYN ? module.start - first_vaddr : 0;

  std::vector<Elf64_Shdr> sections(eh.e_shnum);
  for (int i = 0; i < eh.e_shnum; ++i)
    if (!read_at(file, eh.e_shoff + uint64_t(i) * sizeof(Elf64_Shdr), sections[i])) return std::nullopt;
  const Elf64_Shdr* dynsym = nullptr;
  const Elf64_Shdr* versym = nullptr;
  for (const Elf64_Shdr& s : sections) {
    if (s.sh_type == SHT_DYNSYM) dynsym = &s;
    if (s.sh_type == SHT_GNU_versym) versym = &s;
  }
  if (!dynsym || dynsym->sh_link >= sections.size() || dynsym->sh_entsize != sizeof(Elf64_Sym)) return std::nullopt;
  const Elf64_Shdr& strings = sections[dynsym->sh_link];
  std::optional<uint64_t> found;
  for (uint64_t i = 0; i < dynsym->sh_size / sizeof(Elf64_Sym); ++i) {
    Elf64_Sym sym;
    if (!read_at(file, dynsym->sh_offset + i * sizeof sym, sym)) break;
    if (sym.st_shndx == SHN_UNDEF || ELF64_ST_TYPE(sym.st_info) != STT_FUNC || sym.st_name >= strings.sh_size) continue;
    const char* text = file.data() + strings.sh_offset + sym.st_name;
    size_t room = strings.sh_size - sym.st_name;
    if (strnlen(text, room) != name.size() || name.compare(0, name.size(), text, name.size()) != 0) continue;
    Elf64_Half version = 0;
    bool hidden = versym && read_at(file, versym->sh_offset + i * sizeof version, version) && (version & 0x8000);
    if (!hidden) return bias + sym.st_value;  // the default version
    if (!found) found = bias + sym.st_value;
  }
  return found;
}

}  // namespace memtrace::attach
