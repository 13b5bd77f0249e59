// The dynamic symbols of the modules loaded in this process, read from the loader's own view of
// them in memory (their dynamic sections), as dlsym would, but by any test of the name: PyTorch's
// C++ entry points are found by their mangled names' prefix, since the rest of the name follows
// types that change between versions.
#pragma once

#include <cstdint>
#include <string_view>

namespace memtrace::inject {

struct LoadedModule {
  uint64_t base = 0;            // the load bias
  uint64_t start = 0, end = 0;  // what its PT_LOAD segments span
  const void* dynamic = nullptr;
  bool found() const { return dynamic != nullptr; }
};

// The loaded module whose file name (without folders) starts with PREFIX ("libtorch_cuda.so").
LoadedModule find_loaded_module(std::string_view prefix);

// The loaded module whose segments span ADDRESS.
LoadedModule loaded_module_containing(uint64_t address);

// Calls FN(name, address) for each defined symbol of MODULE until FN returns true; returns
// whether it did.
using SymbolVisitor = bool (*)(void* context, std::string_view name, uint64_t address, uint64_t size);
bool visit_dynamic_symbols(const LoadedModule& module, SymbolVisitor fn, void* context);

// The address of the symbol NAME defined in MODULE, or 0; its size in SIZE if asked.
uint64_t find_dynamic_symbol(const LoadedModule& module, std::string_view name, uint64_t* size = nullptr);
// The address of the first symbol whose name starts with PREFIX, or 0; COUNT is how many do.
uint64_t find_dynamic_symbol_prefix(const LoadedModule& module, std::string_view prefix, int& count);

}  // namespace memtrace::inject
