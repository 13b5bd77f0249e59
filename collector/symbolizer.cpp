#include "symbolizer.h"

#include <cxxabi.h>
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace memtrace {

namespace {

const Dwfl_Callbacks kCallbacks = {
    .find_elf = dwfl_build_id_find_elf,
    .find_debuginfo = dwfl_standard_find_debuginfo,  // also finds separate debug files
    .section_address = dwfl_offline_section_address,
    .debuginfo_path = nullptr,
};

std::string demangle(const char* name) {
  if (!name) return {};
  int status = 0;
  char* out = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  if (status != 0 || !out) return name;
  std::string result(out);
  std::free(out);
  return result;
}

// The name of a function DIE, demangled from its linkage name when it has one.
std::string die_name(Dwarf_Die* die) {
  Dwarf_Attribute attr;
  const char* linkage = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_linkage_name, &attr));
  if (!linkage) linkage = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &attr));
  if (linkage) return demangle(linkage);
  const char* name = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_name, &attr));
  return name ? name : "";
}

std::string call_file(Dwarf_Die* cu, Dwarf_Die* inlined) {
  Dwarf_Attribute attr;
  Dwarf_Word index;
  if (dwarf_formudata(dwarf_attr(inlined, DW_AT_call_file, &attr), &index) != 0) return {};
  Dwarf_Files* files;
  size_t count;
  if (dwarf_getsrcfiles(cu, &files, &count) != 0 || index >= count) return {};
  const char* name = dwarf_filesrc(files, index, nullptr, nullptr);
  return name ? name : "";
}

uint32_t call_line(Dwarf_Die* inlined) {
  Dwarf_Attribute attr;
  Dwarf_Word line;
  return dwarf_formudata(dwarf_attr(inlined, DW_AT_call_line, &attr), &line) == 0 ? static_cast<uint32_t>(line) : 0;
}

// The C runtime's and the toolchain's own libraries: their frames are named by their symbol
// tables alone. Their source lines are glibc's and GCC's, never the program's, and their
// separate debug files (libc6-dbg) are compressed: reading libc's took ~85 ms, which a short
// program waited for at its exit.
bool names_only(const std::string& path) {
  std::string name = path.substr(path.rfind('/') + 1);
  for (const char* prefix : {"libc.so.", "ld-linux", "libm.so.", "libpthread.so.", "libdl.so.", "librt.so.",
                             "libgcc_s.so.", "libstdc++.so."})
    if (name.rfind(prefix, 0) == 0) return true;
  return false;
}

}  // namespace

struct Symbolizer::Module {
  Dwfl* dwfl = nullptr;
  Dwfl_Module* mod = nullptr;
  ~Module() {
    if (dwfl) dwfl_end(dwfl);
  }
};

Symbolizer::Symbolizer() = default;
Symbolizer::~Symbolizer() = default;

// Each module in a session of its own, at its ELF addresses (bias 0): frames arrive as ELF
// virtual addresses, whatever address the process loaded the module at.
Symbolizer::Module* Symbolizer::module(const std::string& path) {
  auto [it, fresh] = modules_.try_emplace(path);
  if (!fresh) return it->second.get();
  auto m = std::make_unique<Module>();
  m->dwfl = dwfl_begin(&kCallbacks);
  if (m->dwfl) {
    m->mod = dwfl_report_elf(m->dwfl, path.c_str(), path.c_str(), -1, 0, false);
    dwfl_report_end(m->dwfl, nullptr, nullptr);
  }
  if (!m->mod) m.reset();
  it->second = std::move(m);
  return it->second.get();
}

const std::vector<SourceFrame>& Symbolizer::symbolize(const std::string& path, uint64_t vaddr) {
  std::lock_guard lock(mutex_);
  auto& per_module = cache_[path];
  auto [it, fresh] = per_module.try_emplace(vaddr);
  std::vector<SourceFrame>& frames = it->second;
  if (!fresh) return frames;
  Module* m = module(path);
  if (!m) return frames;
  const Dwarf_Addr pc = vaddr > 0 ? vaddr - 1 : 0;  // inside the call instruction

  // The outermost function: the symbol table names it even without debug information.
  SourceFrame outer;
  GElf_Sym sym;
  GElf_Off offset;
  outer.function = demangle(dwfl_module_addrinfo(m->mod, pc, &offset, &sym, nullptr, nullptr, nullptr));
  // Line information only from a compile unit that covers PC: code without debug information
  // (crt1's _start) would otherwise borrow the nearest line of some other file.
  Dwarf_Addr bias = 0;
  Dwarf_Die* cu = names_only(path) ? nullptr : dwfl_module_addrdie(m->mod, pc, &bias);
  Dwfl_Line* source = cu ? dwfl_module_getsrc(m->mod, pc) : nullptr;
  if (source) {
    int lineno = 0;
    const char* file = dwfl_lineinfo(source, nullptr, &lineno, nullptr, nullptr, nullptr);
    outer.file = file ? file : "";
    outer.line = static_cast<uint32_t>(lineno);
  }

  // Inlined calls: the scopes at PC, innermost first. Each inlined function is a frame at the
  // location so far; the call site it records is the location in the function around it.
  Dwarf_Die* scopes = nullptr;
  int n = cu ? dwarf_getscopes(cu, pc - bias, &scopes) : 0;
  std::string file = outer.file;
  uint32_t line = outer.line;
  for (int i = 0; i < n; ++i) {
    int tag = dwarf_tag(&scopes[i]);
    if (tag == DW_TAG_inlined_subroutine) {
      frames.push_back(SourceFrame{die_name(&scopes[i]), file, line, true});
      file = call_file(cu, &scopes[i]);
      line = call_line(&scopes[i]);
    } else if (tag == DW_TAG_subprogram) {
      std::string name = die_name(&scopes[i]);
      if (!name.empty() && outer.function.empty()) outer.function = name;
      break;
    }
  }
  std::free(scopes);
  outer.file = file;
  outer.line = line;
  frames.push_back(outer);
  return frames;
}

}  // namespace memtrace
