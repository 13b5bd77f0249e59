"""memtrace's Python shim, put on PYTHONPATH by `memtrace run` (with or without Python stacks).

At start-up, holding the GIL, it lets memtrace's injector check that it reads this interpreter's
frames right, so that the frames of threads that release the GIL (as PyTorch does around every
op) are recorded from the first allocation on. (ctypes looks functions up in the library it
opened, with dlsym on that handle: the injector's dlsym answers such lookups of CUDA allocation
functions with its interposers, so ctypes needs nothing here.)

With PyTorch, once torch is imported: when PyTorch initializes CUDA (torch.cuda._lazy_call), the
injector attaches to its caching allocator's trace tracker (the allocated layer: tensors);
optimizer steps mark memtrace.step and tell which tensors are parameters, gradients and optimizer
state; backward and optimizer steps are phases. None of it changes what the program computes, and
nothing here ever raises into it.

Any sitecustomize the program had is loaded after this one.
"""

import os
import sys


def _check_frames():
    if os.environ.get("MEMTRACE_PYTHON_STACKS") == "0":
        return  # --no-python-stacks
    try:
        import ctypes
        ctypes.PyDLL(None).memtrace_python_ready()  # PyDLL: called with the GIL held
    except (ImportError, AttributeError, OSError):
        pass  # no injector in this process (a program memtrace does not trace)


def _memtrace_exports():
    """memtrace's functions for the shim, called holding the GIL; None when not traced."""
    try:
        import ctypes
        lib = ctypes.PyDLL(None)
        exports = {name: getattr(lib, name) for name in (
            "memtrace_torch_attach", "memtrace_mark", "memtrace_range_push", "memtrace_range_pop", "memtrace_tag")}
    except (ImportError, AttributeError, OSError):
        return None
    exports["memtrace_tag"].argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_char_p]
    exports["memtrace_torch_attach"].argtypes = [ctypes.c_char_p]
    exports["memtrace_mark"].argtypes = [ctypes.c_char_p]
    exports["memtrace_range_push"].argtypes = [ctypes.c_char_p]
    return exports


def _torch_imported(torch):
    exports = _memtrace_exports()
    if exports is None:
        return
    import array
    import functools

    def attach():
        # Runs inside torch.cuda._lazy_init, which turns an exception into the program's error.
        try:
            version = str(getattr(torch, "__version__", "?")).encode()
            exports["memtrace_torch_attach"](version)
        except Exception:
            pass

    def tag(pointers, category):
        if pointers:
            a = array.array("Q", pointers)
            exports["memtrace_tag"](a.buffer_info()[0], len(a), category)

    def is_cuda_tensor(t):
        return isinstance(t, torch.Tensor) and t.is_cuda

    def tag_optimizer_tensors(optimizer):
        params, grads, states = [], [], []
        for group in optimizer.param_groups:
            for p in group["params"]:
                if is_cuda_tensor(p):
                    params.append(p.data_ptr())
                    if is_cuda_tensor(p.grad):
                        grads.append(p.grad.data_ptr())
        for state in optimizer.state.values():
            for value in (state.values() if isinstance(state, dict) else ()):
                if is_cuda_tensor(value):
                    states.append(value.data_ptr())
        tag(params, b"parameter")
        tag(grads, b"gradient")
        tag(states, b"optimizer_state")

    def before_step(optimizer, args, kwargs):
        try:
            exports["memtrace_range_push"](b"optimizer.step")
        except Exception:
            pass

    def after_step(optimizer, args, kwargs):
        try:
            tag_optimizer_tensors(optimizer)
            exports["memtrace_range_pop"]()
            exports["memtrace_mark"](b"memtrace.step")
        except Exception:
            pass

    try:
        cuda = getattr(torch, "cuda", None)
        if cuda is not None and hasattr(cuda, "_lazy_call"):
            cuda._lazy_call(attach)
        hooks = getattr(getattr(torch, "optim", None), "optimizer", None)
        if hooks is not None and hasattr(hooks, "register_optimizer_step_post_hook"):
            hooks.register_optimizer_step_pre_hook(before_step)
            hooks.register_optimizer_step_post_hook(after_step)
        autograd = getattr(torch, "autograd", None)
        original_backward = getattr(autograd, "backward", None)
        if original_backward is not None and not getattr(original_backward, "_memtrace", False):
            @functools.wraps(original_backward)
            def backward(*args, **kwargs):
                try:
                    exports["memtrace_range_push"](b"backward")
                except Exception:
                    pass
                try:
                    return original_backward(*args, **kwargs)
                finally:
                    try:
                        exports["memtrace_range_pop"]()
                    except Exception:
                        pass
            backward._memtrace = True
            autograd.backward = backward
    except Exception:
        pass


def _watch_for_torch():
    """Calls _torch_imported once torch is imported: a finder that wraps torch's loader."""
    if os.environ.get("MEMTRACE_TORCH") == "0":
        return
    if "torch" in sys.modules:
        _torch_imported(sys.modules["torch"])
        return
    import importlib.abc
    import importlib.util

    class AfterImport(importlib.abc.Loader):
        def __init__(self, loader):
            self._loader = loader

        def create_module(self, spec):
            return self._loader.create_module(spec)

        def exec_module(self, module):
            self._loader.exec_module(module)
            try:
                _torch_imported(module)
            except Exception:
                pass

        def __getattr__(self, name):
            return getattr(self._loader, name)

    class WatchForTorch(importlib.abc.MetaPathFinder):
        searching = False

        def find_spec(self, name, path=None, target=None):
            if name != "torch" or self.searching:
                return None
            self.searching = True
            try:
                spec = importlib.util.find_spec(name)
            finally:
                self.searching = False
            try:
                sys.meta_path.remove(self)  # once is enough
            except ValueError:
                pass
            if spec is None or spec.loader is None:
                return spec
            spec.loader = AfterImport(spec.loader)
            return spec

    sys.meta_path.insert(0, WatchForTorch())


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


_check_frames()
_watch_for_torch()
_load_next_sitecustomize()
