"""PyTorch, heard from inside, once torch is imported:

- when PyTorch initializes CUDA (torch.cuda._lazy_call), the injector attaches to its caching
  allocator's trace tracker (the allocated layer: tensors); where this release has none memtrace
  can reach, PyTorch's own recorder stands in (torch_history);
- PyTorch's own counters (torch.cuda.memory_stats) are recorded at exit and at each out-of-memory
  (its OOM observer), so that every report holds memtrace's figures against PyTorch's; the
  program's resets of PyTorch's peaks are marked;
- optimizer steps mark memtrace.step and tell which tensors are parameters, gradients and optimizer
  state; backward and optimizer steps are phases.

torch.compile: these hooks run in the program's own frames, so Dynamo would trace them (it inlines
every Python function a compiled region calls unless told not to): once torch._dynamo is imported,
each is wrapped in torch._dynamo.disable, the documented way to keep a function out of a graph.
"""

import atexit
import functools
import os
import sys

# PyTorch's counters recorded beside memtrace's figures (torch.cuda.memory_stats' names).
COUNTERS = ("allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current",
            "reserved_bytes.all.peak", "requested_bytes.all.current", "requested_bytes.all.peak",
            "active_bytes.all.peak", "num_ooms", "num_alloc_retries")

# memtrace_torch_attach's answers.
ATTACHED, NOT_ATTACHED, USE_HISTORY = 1, 0, 2


def _quiet(fn):
    """FN, never raising into the program."""
    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception:
            return None
    return call


def device_pointers(t):
    """The device memory behind tensor T: its storage's; a sparse tensor's values and indices (it
    has no storage: data_ptr() raises); a wrapper subclass's local tensor (DTensor, FSDP2's
    parameters: data_ptr() is 0). Empty when there is none to name."""
    try:
        if getattr(t, "is_sparse", False):
            return device_pointers(t._values()) + device_pointers(t._indices())
        local = getattr(t, "_local_tensor", None)
        if local is not None:
            return device_pointers(local)
        if not getattr(t, "is_cuda", False):
            return []
        p = t.data_ptr()
        return [p] if p else []
    except Exception:
        return []


class TorchHooks:
    def __init__(self, torch, injector):
        self.torch, self.injector = torch, injector
        self.step_hooks = []  # (register function, hook, handle), re-registered under Dynamo's disable
        self.dynamo_done = False
        self.history = None
        # False while memtrace is detached: every hook returns at once. The optimizers' step hooks
        # stay registered (taken out or put back from memtrace's thread, their dict could change
        # while the program's step iterates it); replaced functions are put back as they were.
        self.active = _recording
        self.replaced = []  # (module, name, original, ours): what wrap_peak_reset and hook_backward replaced

    # -- the allocator -----------------------------------------------------------------------

    @_quiet
    def on_cuda_init(self):
        """Runs inside torch.cuda._lazy_init, which turns an exception into the program's error."""
        torch = self.torch
        version = str(getattr(torch, "__version__", "?"))
        if os.environ.get("MEMTRACE_TORCH_RECORDER") == "history":  # PyTorch's own recorder, by request
            self.injector.notice(f"PyTorch {version}: the allocated layer comes from PyTorch's own recorder "
                                 "(MEMTRACE_TORCH_RECORDER=history), read at exit and at each out-of-memory and "
                                 "merged into the trace".encode())
            answer = USE_HISTORY
        else:
            answer = self.injector.torch_attach(version.encode())
        if answer == USE_HISTORY:
            from . import torch_history
            self.history = torch_history.start(torch, self.injector)
        attach_observer = getattr(getattr(torch, "_C", None), "_cuda_attach_out_of_memory_observer", None)
        if attach_observer is not None:
            try:
                attach_observer(self.on_oom)
            except Exception:
                pass  # the cudaMallocAsync backend has no observers

    @_quiet
    def on_oom(self, device, alloc, device_total, device_free):
        """PyTorch's OOM observer: with the GIL, after the allocator let go of its lock."""
        if not self.active:
            return  # observers cannot be removed
        self.record_counters("oom", [device])
        if self.history is not None:
            self.history.collect("oom")

    @_quiet
    def at_exit(self):
        if not self.active:
            return
        if self.torch.cuda.is_initialized():
            self.record_counters("exit", range(self.torch.cuda.device_count()))
        if self.history is not None:
            self.history.collect("exit")

    def record_counters(self, when, devices):
        for device in devices:
            try:
                stats = self.torch.cuda.memory_stats(device)
            except Exception:
                return  # an allocator that keeps none (a pluggable one)
            if not stats or not stats.get("reserved_bytes.all.peak"):
                continue  # a device this process never allocated on
            for name in COUNTERS:
                if name in stats:
                    self.injector.counter(device, f"{when}:{name}".encode(), int(stats[name]))

    def wrap_peak_reset(self):
        """Marks torch.cuda.reset_peak_memory_stats, so that memtrace's peaks restart with PyTorch's."""
        memory = getattr(self.torch.cuda, "memory", None)
        original = getattr(memory, "reset_peak_memory_stats", None)
        if original is None or getattr(original, "_memtrace", False):
            return
        injector, torch = self.injector, self.torch

        @functools.wraps(original)
        def reset_peak_memory_stats(device=None):
            result = original(device)
            try:
                index = torch.cuda.memory._get_device_index(device, optional=True) \
                    if hasattr(torch.cuda.memory, "_get_device_index") else (device or 0)
                injector.counter(int(getattr(index, "index", index) or 0), b"reset_peak", 0)
            except Exception:
                pass
            return result

        reset_peak_memory_stats._memtrace = True
        for module in (memory, self.torch.cuda):
            if getattr(module, "reset_peak_memory_stats", None) is original:
                module.reset_peak_memory_stats = reset_peak_memory_stats
                self.replaced.append((module, "reset_peak_memory_stats", original, reset_peak_memory_stats))

    # -- steps and phases -------------------------------------------------------------------

    def before_step(self, optimizer, args, kwargs):
        if not self.active:
            return
        try:
            self.injector.range_push(b"optimizer.step")
        except Exception:
            pass

    def after_step(self, optimizer, args, kwargs):
        if not self.active:
            return
        # The step first: what the tensors are must never cost the program its steps.
        try:
            self.injector.range_pop()
            self.injector.mark(b"memtrace.step")
        except Exception:
            pass
        try:
            self.tag_optimizer_tensors(optimizer)
        except Exception:
            pass

    def tag(self, pointers, category):
        if pointers:
            import array
            a = array.array("Q", pointers)
            self.injector.tag(a.buffer_info()[0], len(a), category)

    def tag_optimizer_tensors(self, optimizer):
        params, grads, states = [], [], []
        for group in optimizer.param_groups:
            for p in group["params"]:
                params += device_pointers(p)
                grad = getattr(p, "grad", None)
                if grad is not None:
                    grads += device_pointers(grad)
        for state in optimizer.state.values():
            for value in (state.values() if isinstance(state, dict) else ()):
                if isinstance(value, self.torch.Tensor):
                    states += device_pointers(value)
        self.tag(params, b"parameter")
        self.tag(grads, b"gradient")
        self.tag(states, b"optimizer_state")

    def hook_steps(self, disable=None):
        """Registers the step hooks, once; in Dynamo's DISABLE when torch._dynamo is there already."""
        # torch.optim.optimizer, where the global step hooks live: torch/optim/__init__.py takes the
        # name out of the package (`del optimizer`: Debian's 1.13 here, the 2.x sources, 2.11 on a
        # GPU machine, where memtrace found no steps until this looked in sys.modules). torch
        # imports it; should a release import it later, the hooks are registered when it does.
        hooks = sys.modules.get("torch.optim.optimizer")
        if hooks is None:
            _after_import("torch.optim.optimizer",
                          lambda module: self.hook_steps(getattr(sys.modules.get("torch._dynamo"), "disable", None)))
            return
        if not hasattr(hooks, "register_optimizer_step_post_hook"):
            return
        for register, hook in ((hooks.register_optimizer_step_pre_hook, self.before_step),
                               (hooks.register_optimizer_step_post_hook, self.after_step)):
            hook = disable(hook) if disable else hook
            self.step_hooks.append([register, hook, register(hook)])

    def hook_backward(self):
        autograd = getattr(self.torch, "autograd", None)
        original = getattr(autograd, "backward", None)
        if original is None or getattr(original, "_memtrace", False):
            return
        injector = self.injector

        hooks = self

        @functools.wraps(original)
        def backward(*args, **kwargs):
            if not hooks.active:
                return original(*args, **kwargs)
            try:
                injector.range_push(b"backward")
            except Exception:
                pass
            try:
                return original(*args, **kwargs)
            finally:
                try:
                    injector.range_pop()
                except Exception:
                    pass

        backward._memtrace = True
        autograd.backward = backward
        self.replaced.append((autograd, "backward", original, backward))

    # -- memtrace attach and detach ----------------------------------------------------------

    def unhook(self):
        """memtrace detached: the functions memtrace replaced put back as they were (where the
        program has not replaced them since); every hook returns at once from now on (PyTorch's
        trace tracker and OOM observer cannot be removed either)."""
        self.active = False
        for module, name, original, ours in self.replaced:
            if getattr(module, name, None) is ours:
                setattr(module, name, original)

    def rehook(self):
        """memtrace attached again: its own wrappers put back (never a second layer), and PyTorch's
        tracker attached if CUDA started while memtrace was away."""
        self.active = True
        for module, name, original, ours in self.replaced:
            if getattr(module, name, None) is original:
                setattr(module, name, ours)
        if self.torch.cuda.is_initialized():
            self.injector.torch_attach(str(getattr(self.torch, "__version__", "?")).encode())

    # -- torch.compile ----------------------------------------------------------------------

    @_quiet
    def keep_out_of_graphs(self, dynamo):
        """Wraps every hook in torch._dynamo.disable (once torch._dynamo is imported)."""
        if self.dynamo_done:
            return
        disable = getattr(dynamo, "disable", None)
        if disable is None:
            return
        self.dynamo_done = True
        for entry in self.step_hooks:
            register, hook, handle = entry
            handle.remove()
            entry[1] = disable(hook)
            entry[2] = register(entry[1])
        self.disable_backward(disable)

    def disable_backward(self, disable):
        """Wraps memtrace's backward in Dynamo's disable (it stays what unhook restores from)."""
        autograd = self.torch.autograd
        ours = autograd.backward
        if getattr(ours, "_memtrace", False):
            disabled = disable(ours)
            disabled._memtrace = True
            autograd.backward = disabled
            self.replaced = [(m, n, o, disabled if w is ours else w) for m, n, o, w in self.replaced]


def torch_imported(torch, injector):
    hooks = TorchHooks(torch, injector)
    cuda = getattr(torch, "cuda", None)
    if cuda is not None and hasattr(cuda, "_lazy_call"):
        cuda._lazy_call(hooks.on_cuda_init)
    # Dynamo there already (memtrace attach, memtrace.record): the hooks are registered disabled
    # from the start, never taken out and registered again.
    disable = getattr(sys.modules.get("torch._dynamo"), "disable", None)
    hooks.dynamo_done = disable is not None
    hooks.hook_steps(disable)
    hooks.hook_backward()
    hooks.wrap_peak_reset()
    if disable is not None:
        hooks.disable_backward(disable)
    atexit.register(hooks.at_exit)
    return hooks


# The hooks of this process, once torch is imported (for memtrace attach's detach and attach again),
# and whether memtrace records now (hooks made while it is detached start inactive).
_state = {"hooks": None}
_recording = True


def set_recording(recording):
    global _recording
    _recording = recording
    hooks = _state["hooks"]
    if hooks is not None:
        (hooks.rehook if recording else hooks.unhook)()


def current():
    return _state["hooks"]


def watch(injector):
    """Calls torch_imported once torch is imported (a finder that wraps torch's loader), and
    keeps the hooks out of Dynamo's graphs once torch._dynamo is."""
    state = _state

    def on_torch(module):
        state["hooks"] = torch_imported(module, injector)
        if "torch._dynamo" in sys.modules:
            state["hooks"].keep_out_of_graphs(sys.modules["torch._dynamo"])

    def on_dynamo(module):
        if state["hooks"] is not None:
            state["hooks"].keep_out_of_graphs(module)

    if "torch" in sys.modules and not _initializing(sys.modules["torch"]):
        on_torch(sys.modules["torch"])
        if "torch._dynamo" not in sys.modules:
            _after_import("torch._dynamo", on_dynamo)
        return
    _after_import("torch", on_torch)
    _after_import("torch._dynamo", on_dynamo)


def _initializing(module):
    spec = getattr(module, "__spec__", None)
    return bool(getattr(spec, "_initializing", False))


def _after_import(name, callback):
    """Calls CALLBACK(module) once module NAME has been imported: a finder that wraps its loader."""
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
                callback(module)
            except Exception:
                pass

        def __getattr__(self, attribute):
            return getattr(self._loader, attribute)

    class WatchFor(importlib.abc.MetaPathFinder):
        searching = False

        def find_spec(self, fullname, path=None, target=None):
            if fullname != name or self.searching:
                return None
            self.searching = True
            try:
                spec = importlib.util.find_spec(fullname)
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

    sys.meta_path.insert(0, WatchFor())
