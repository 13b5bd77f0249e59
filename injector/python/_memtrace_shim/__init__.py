"""memtrace's Python side, inside the traced program. Once per process image, with the GIL: it
lets the injector check that it reads this interpreter's frames right (so that threads without
the GIL get Python frames from the first allocation on), and watches for PyTorch (torch_hooks).
Nothing here changes what the program computes, and nothing ever raises into it.

ctypes looks functions up in the library it opened, with dlsym on that handle: the injector's
dlsym answers such lookups of CUDA allocation functions with its interposers, so ctypes programs
need nothing here.
"""

import os
import sys

from . import exports


def start(library=None):
    """Starts memtrace's Python side; False when this process is not traced or it already ran.
    LIBRARY: the injector as memtrace.record loaded it (a ctypes.PyDLL); by default the one
    preloaded into the process."""
    injector = exports.load(library)
    if injector is None or not injector.claim():
        return False
    if os.environ.get("MEMTRACE_PYTHON_STACKS") != "0":
        injector.python_ready()
    if os.environ.get("MEMTRACE_TORCH") != "0":
        from . import torch_hooks
        torch_hooks.watch(injector)
    return True


def recording_started(library):
    """Recording starts while the process runs (memtrace attach, from the injector's attach thread;
    memtrace.record), with the GIL: starts the shim the first time (its PyTorch hooks put back
    after a detach), then tells what PyTorch's allocator holds now (existing)."""
    from . import torch_hooks
    torch_hooks.set_recording(True)
    start(library)
    injector = exports.load(library)
    torch = sys.modules.get("torch")
    if injector is None or torch is None:
        return
    from . import existing
    held = existing.publish(torch, injector.existing)
    if held is not None:
        tensors, segments = held
        injector.notice(("PyTorch's allocator held, when recording started, %d tensor%s in %d segment%s: in this "
                         "trace as allocations live before it, without their stacks" % (
                             tensors, "" if tensors == 1 else "s", segments, "" if segments == 1 else "s")).encode())


def recording_stopped():
    """Recording stops while the process runs on (memtrace detach, memtrace.stop), with the GIL:
    PyTorch's functions as they were."""
    from . import torch_hooks
    torch_hooks.set_recording(False)


def _started_by_injector():
    """Called by the injector (from a pending call, with the GIL) where site or PYTHONPATH did not
    bring sitecustomize: python -E, -I or -S."""
    try:
        start()
    except Exception:
        pass
