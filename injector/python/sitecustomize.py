"""memtrace's Python shim, put on PYTHONPATH by `memtrace run` (with or without Python stacks).

It starts memtrace's Python side (_memtrace_shim: Python frames, PyTorch), then loads any
sitecustomize the program had. When Python runs without PYTHONPATH or site (-E, -I, -S), memtrace's
injector starts the same package itself, once the interpreter is up (injector/python_shim.cpp).
"""

import os
import sys


def _start():
    try:
        import _memtrace_shim
        _memtrace_shim.start()
    except Exception:
        pass  # never into the program


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


_start()
_load_next_sitecustomize()
