// dlsym, interposed: a program that looks a CUDA entry point up in a CUDA library's handle gets
// memtrace's interposer for it. NVIDIA's static runtime (nvcc's default, and NCCL's) opens
// libcuda.so.1 itself and fetches cuGetProcAddress_v2 from that handle; TensorFlow, ctypes and
// other wrappers open a private libcudart and look every function up in it. None of their calls
// would reach an interposer in the global scope.
//
// dlsym(RTLD_NEXT, ...) and dlsym(RTLD_DEFAULT, ...) are answered relative to their caller's
// module, found from the return address, so they must reach the real dlsym with the program's
// return address on the stack: a tail jump, which only assembly guarantees. Those lookups never
// need changing: the global scope already finds memtrace's interposers first.
#include <dlfcn.h>

#include <cstdint>
#include <cstring>
#include <string_view>

#include "elf_symbols.h"
#include "interpose.h"
#include "stack_capture.h"

using Dlsym = void* (*)(void*, const char*);

extern "C" {
// libc's dlsym, found on the first call.
__attribute__((visibility("hidden"), used)) Dlsym memtrace_real_dlsym = nullptr;
__attribute__((visibility("hidden"), used)) Dlsym memtrace_resolve_real_dlsym();
__attribute__((visibility("hidden"), used)) void* memtrace_dlsym_in_handle(void* handle, const char* name);
}

#if defined(__x86_64__)
// RTLD_DEFAULT is 0 and RTLD_NEXT is -1 in glibc. The lazy path keeps the arguments across the
// call and the stack 16-byte aligned (8 on entry, two pushes and 8 more).
asm(R"(
    .text
    .globl dlsym
    .type dlsym, @function
    .p2align 4
dlsym:
    .cfi_startproc
    test %rdi, %rdi
    jz 1f
    cmp $-1, %rdi
    je 1f
    jmp memtrace_dlsym_in_handle
1:  mov memtrace_real_dlsym(%rip), %rax
    test %rax, %rax
    jz 2f
    jmp *%rax
2:  push %rdi
    .cfi_adjust_cfa_offset 8
    push %rsi
    .cfi_adjust_cfa_offset 8
    sub $8, %rsp
    .cfi_adjust_cfa_offset 8
    call memtrace_resolve_real_dlsym
    add $8, %rsp
    .cfi_adjust_cfa_offset -8
    pop %rsi
    .cfi_adjust_cfa_offset -8
    pop %rdi
    .cfi_adjust_cfa_offset -8
    test %rax, %rax
    jz 3f
    jmp *%rax
3:  ret
    .cfi_endproc
    .size dlsym, .-dlsym
)");
#endif

// Versioned lookups skip memtrace's unversioned dlsym: glibc 2.34 moved dlsym into libc and
// versions it GLIBC_2.34 there; older glibc has only GLIBC_2.2.5 (in libdl).
Dlsym memtrace_resolve_real_dlsym() {
  auto fn = reinterpret_cast<Dlsym>(::dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34"));
  if (!fn) fn = reinterpret_cast<Dlsym>(::dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5"));
  __atomic_store_n(&memtrace_real_dlsym, fn, __ATOMIC_RELEASE);
  return fn;
}

namespace memtrace::inject {

bool from_cuda_library(const void* fn) {
  Dl_info info{};
  if (!::dladdr(fn, &info) || !info.dli_fname) return false;
  std::string_view path = info.dli_fname;
  size_t slash = path.rfind('/');
  std::string_view file = slash == std::string_view::npos ? path : path.substr(slash + 1);
  return file.starts_with("libcuda.so") || file.starts_with("libcudart") || file.starts_with("libcupti");
}

void* interposer_for_found(const char* name, void* fn, uint64_t caller) {
  void* ours = own_interposer(name);
  if (!ours || ours == fn || !from_cuda_library(fn)) return fn;
  pin_real_function(name, caller, fn);
  return ours;
}

void* own_interposer(const char* name) {
  static const LoadedModule self = loaded_module_containing(reinterpret_cast<uint64_t>(&own_interposer));
  uint64_t address = find_dynamic_symbol(self, name);
  return address && in_injector(address) ? reinterpret_cast<void*>(address) : nullptr;
}

namespace {

// What a lookup of NAME in a handle answers, given that the real lookup found FN for CALLER.
void* answer(const char* name, void* fn, uint64_t caller) {
  // Not a CUDA entry point, or memtrace's own lookups (resolving a real function): the real answer.
  // A lookup made inside a recorded call (a runtime initializing inside the program's first
  // cudaMalloc) is answered as any other: what a runtime's table holds must not depend on which
  // call came first.
  if (name[0] != 'c' || name[1] != 'u' || in_injector(caller)) return fn;
  // Its private tables of driver functions are nobody's to replace.
  if (std::strcmp(name, "cuGetExportTable") == 0) return fn;
  return interposer_for_found(name, fn, caller);
}

}  // namespace
}  // namespace memtrace::inject

// Reached by a tail jump from dlsym: the return address is the program's.
void* memtrace_dlsym_in_handle(void* handle, const char* name) {
  const auto caller = reinterpret_cast<uint64_t>(__builtin_return_address(0));
  Dlsym real = __atomic_load_n(&memtrace_real_dlsym, __ATOMIC_ACQUIRE);
  if (!real) real = memtrace_resolve_real_dlsym();
  if (!real) return nullptr;
  void* fn = real(handle, name);
  if (!fn || !name) return fn;
  return memtrace::inject::answer(name, fn, caller);
}
