"""memtrace's Python shim, put on PYTHONPATH by `memtrace run` (with or without Python stacks).

At start-up, holding the GIL, it lets memtrace's injector check that it reads this interpreter's
frames right, so that the frames of threads that release the GIL (as PyTorch does around every
op) are recorded from the first allocation on.

ctypes looks functions up in the library it opened (dlsym on that handle), which skips the
interposers memtrace preloads. For the CUDA libraries, this shim looks an allocation function up
in the global scope first and takes it when it is memtrace's own interposer, which then calls the
library's function: the program calls the same function as before, and memtrace sees the call.
Any sitecustomize the program had is loaded after this one.
"""

import os
import sys


def _route_cuda_lookups():
    try:
        import ctypes
    except ImportError:
        return

    class _Global:
        _handle = 0  # dlsym(RTLD_DEFAULT, ...)

    class _DlInfo(ctypes.Structure):
        _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                    ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]

    try:
        dladdr = ctypes.CDLL(None).dladdr
    except AttributeError:
        return
    dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]

    def is_memtrace(func):
        info = _DlInfo()
        address = ctypes.cast(func, ctypes.c_void_p).value
        return bool(dladdr(address, ctypes.byref(info))) and info.dli_fname is not None and \
            os.path.basename(info.dli_fname).startswith(b"libmemtrace_inject")

    original_init = ctypes.CDLL.__init__
    original_getitem = ctypes.CDLL.__getitem__

    def __init__(self, name, *args, **kwargs):
        original_init(self, name, *args, **kwargs)
        base = os.path.basename(name) if isinstance(name, str) else ""
        self._memtrace_cuda = base.startswith(("libcudart.so", "libcuda.so"))

    def is_cuda_library(self):
        # Read from the instance's own dict: getattr would reach CDLL.__getattr__, which looks the
        # name up as a function through __getitem__, here, again and again, for a subclass that
        # never ran CDLL.__init__. Such an instance is judged by the name it carries, if any.
        known = self.__dict__.get("_memtrace_cuda")
        if known is None:
            name = self.__dict__.get("_name")
            base = os.path.basename(name) if isinstance(name, str) else ""
            known = base.startswith(("libcudart.so", "libcuda.so"))
        return known

    def __getitem__(self, name_or_ordinal):
        if isinstance(name_or_ordinal, str) and is_cuda_library(self):
            try:
                func = self._FuncPtr((name_or_ordinal, _Global()))
            except AttributeError:
                func = None
            if func is not None and is_memtrace(func):
                func.__name__ = name_or_ordinal
                return func
        return original_getitem(self, name_or_ordinal)

    ctypes.CDLL.__init__ = __init__
    ctypes.CDLL.__getitem__ = __getitem__


def _check_frames():
    if os.environ.get("MEMTRACE_PYTHON_STACKS") == "0":
        return  # --no-python-stacks
    try:
        import ctypes
        ctypes.PyDLL(None).memtrace_python_ready()  # PyDLL: called with the GIL held
    except (ImportError, AttributeError, OSError):
        pass  # no injector in this process (a program memtrace does not trace)


def _load_next_sitecustomize():
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        if os.path.abspath(entry or os.curdir) == here:
            continue
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", [entry])
        if spec is not None and spec.loader is not None:
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return


_route_cuda_lookups()
_check_frames()
_load_next_sitecustomize()
