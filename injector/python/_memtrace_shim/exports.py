"""The injector's functions for the shim (libmemtrace_inject.so, preloaded into the program),
called through ctypes.PyDLL: with the GIL held, as they must be."""

import ctypes


class Injector:
    def __init__(self, lib):
        def fn(name, argtypes=None, restype=ctypes.c_int):
            f = getattr(lib, name)
            if argtypes is not None:
                f.argtypes = argtypes
            f.restype = restype
            return f

        self.claim = fn("memtrace_shim_claim", [])
        self.python_ready = fn("memtrace_python_ready", [])
        self.torch_attach = fn("memtrace_torch_attach", [ctypes.c_char_p])
        self.mark = fn("memtrace_mark", [ctypes.c_char_p], None)
        self.range_push = fn("memtrace_range_push", [ctypes.c_char_p], None)
        self.range_pop = fn("memtrace_range_pop", [], None)
        self.tag = fn("memtrace_tag", [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_char_p], None)
        self.counter = fn("memtrace_torch_counter", [ctypes.c_int, ctypes.c_char_p, ctypes.c_int64], None)
        self.notice = fn("memtrace_notice", [ctypes.c_char_p], None)
        self.existing = fn("memtrace_existing", [ctypes.c_int, ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64,
                                                 ctypes.c_uint64], None)


def load(library=None):
    """The injector's functions (LIBRARY's, else the preloaded injector's); None in a process
    memtrace does not trace."""
    try:
        return Injector(library if library is not None else ctypes.PyDLL(None))
    except (ImportError, AttributeError, OSError):
        return None
