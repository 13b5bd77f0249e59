#include "elf_symbols.h"

#include <elf.h>
#include <link.h>

#include <cstring>

namespace memtrace::inject {

namespace {

struct Search {
  std::string_view prefix;
  LoadedModule found;
};

std::string_view file_name(const char* path) {
  std::string_view p = path ? path : "";
  size_t slash = p.rfind('/');
  return slash == std::string_view::npos ? p : p.substr(slash + 1);
}

// A dynamic-section pointer: glibc relocates them in place for the modules it loads; one that is
// still relative to the module (the vDSO, other loaders) gets its bias added.
uint64_t dynamic_pointer(uint64_t value, const LoadedModule& m) { return value < m.base ? m.base + value : value; }

// The number of dynamic symbols, from DT_HASH's chain count or DT_GNU_HASH's last chain.
uint64_t symbol_count(uint64_t hash, uint64_t gnu_hash) {
  if (hash) return reinterpret_cast<const uint32_t*>(hash)[1];
  if (!gnu_hash) return 0;
  const auto* h = reinterpret_cast<const uint32_t*>(gnu_hash);
  uint32_t buckets = h[0], first = h[1], bloom_words = h[2];
  const auto* bucket =
      reinterpret_cast<const uint32_t*>(reinterpret_cast<const char*>(h + 4) + bloom_words * sizeof(ElfW(Addr)));
  const uint32_t* chain = bucket + buckets;
  uint32_t last = 0;
  for (uint32_t i = 0; i < buckets; ++i) last = bucket[i] > last ? bucket[i] : last;
  if (last < first) return first;
  while (!(chain[last - first] & 1)) ++last;  // the end of the last bucket's chain
  return last + 1;
}

LoadedModule module_from(const dl_phdr_info* info) {
  LoadedModule m;
  m.base = info->dlpi_addr;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_DYNAMIC) m.dynamic = reinterpret_cast<const void*>(info->dlpi_addr + ph.p_vaddr);
    if (ph.p_type != PT_LOAD) continue;
    uint64_t start = info->dlpi_addr + ph.p_vaddr, end = start + ph.p_memsz;
    if (!m.start || start < m.start) m.start = start;
    if (end > m.end) m.end = end;
  }
  return m;
}

}  // namespace

LoadedModule find_loaded_module(std::string_view prefix) {
  Search search{prefix, {}};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* s = static_cast<Search*>(data);
        if (!file_name(info->dlpi_name).starts_with(s->prefix)) return 0;
        s->found = module_from(info);
        return s->found.found() ? 1 : 0;
      },
      &search);
  return search.found;
}

LoadedModule loaded_module_containing(uint64_t address) {
  struct Containing {
    uint64_t address;
    LoadedModule found;
  } search{address, {}};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* s = static_cast<Containing*>(data);
        LoadedModule m = module_from(info);
        if (s->address < m.start || s->address >= m.end) return 0;
        s->found = m;
        return 1;
      },
      &search);
  return search.found;
}

bool visit_dynamic_symbols(const LoadedModule& m, SymbolVisitor fn, void* context) {
  if (!m.found()) return false;
  uint64_t symtab = 0, strtab = 0, strsz = 0, hash = 0, gnu_hash = 0;
  for (const auto* d = static_cast<const ElfW(Dyn)*>(m.dynamic); d->d_tag != DT_NULL; ++d) {
    switch (d->d_tag) {
      case DT_SYMTAB: symtab = dynamic_pointer(d->d_un.d_ptr, m); break;
      case DT_STRTAB: strtab = dynamic_pointer(d->d_un.d_ptr, m); break;
      case DT_STRSZ: strsz = d->d_un.d_val; break;
      case DT_HASH: hash = dynamic_pointer(d->d_un.d_ptr, m); break;
      case DT_GNU_HASH: gnu_hash = dynamic_pointer(d->d_un.d_ptr, m); break;
      default: break;
    }
  }
  if (!symtab || !strtab) return false;
  uint64_t count = symbol_count(hash, gnu_hash);
  const auto* symbols = reinterpret_cast<const ElfW(Sym)*>(symtab);
  const char* strings = reinterpret_cast<const char*>(strtab);
  for (uint64_t i = 1; i < count; ++i) {
    const ElfW(Sym)& s = symbols[i];
    if (s.st_shndx == SHN_UNDEF || s.st_name >= strsz || s.st_value == 0) continue;
    std::string_view name(strings + s.st_name, strnlen(strings + s.st_name, strsz - s.st_name));
    if (fn(context, name, m.base + s.st_value, s.st_size)) return true;
  }
  return false;
}

uint64_t find_dynamic_symbol(const LoadedModule& m, std::string_view name, uint64_t* size) {
  struct Find {
    std::string_view name;
    uint64_t address = 0, size = 0;
  } find{name};
  visit_dynamic_symbols(
      m,
      [](void* c, std::string_view n, uint64_t address, uint64_t size) {
        auto* f = static_cast<Find*>(c);
        if (n != f->name) return false;
        f->address = address;
        f->size = size;
        return true;
      },
      &find);
  if (size) *size = find.size;
  return find.address;
}

uint64_t find_dynamic_symbol_prefix(const LoadedModule& m, std::string_view prefix, int& count) {
  struct Find {
    std::string_view prefix;
    uint64_t address = 0;
    int count = 0;
  } find{prefix};
  visit_dynamic_symbols(
      m,
      [](void* c, std::string_view n, uint64_t address, uint64_t) {
        auto* f = static_cast<Find*>(c);
        if (!n.starts_with(f->prefix)) return false;
        if (!f->count++) f->address = address;
        return false;
      },
      &find);
  count = find.count;
  return find.address;
}

}  // namespace memtrace::inject
