// The running interpreter's C API, found at run time: memtrace links no libpython (the program's
// own, whichever version it is, is in the global scope once loaded).
#pragma once

#include <dlfcn.h>

namespace memtrace::inject {

// FN set to the interpreter's function (or object) NAME; null where none is loaded.
template <typename Fn>
void find_python(Fn& fn, const char* name) {
  fn = reinterpret_cast<Fn>(::dlsym(RTLD_DEFAULT, name));
}

}  // namespace memtrace::inject
