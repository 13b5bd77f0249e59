"""Recording from inside Python: memtrace.record(), start(), stop(), snapshot().

memtrace's collector runs as a process of its own (`memtrace _record`, started here), as under
`memtrace run`: symbolizing, writing and the snapshots stay out of the program's threads. The
injector is loaded now, with dlopen: the program bound its CUDA functions long ago, so CUPTI's
callbacks record its calls (CUPTI accepts a subscriber at any time), with the same stacks and, once
PyTorch is there, the same tracker of its allocator as `memtrace run`. What was allocated before the
start is not seen: the trace says so, and the device layer at the start is sampled.
"""

import atexit
import ctypes
import importlib.util
import json
import os
import subprocess
import sys
import threading

from . import bundle_dir, executable
from .units import format_bytes

__all__ = ["MemtraceError", "Recording", "record", "start", "stop", "snapshot", "step", "begin_window", "end_window"]

# What the injector reads when it connects; taken out of the environment once it has, so that
# processes the program starts later do not take them for a `memtrace run` of their own.
_SETTINGS = ("MEMTRACE_SOCKET", "MEMTRACE_BACKEND", "MEMTRACE_OUTPUT_DIR", "MEMTRACE_IN_PROCESS")


class MemtraceError(RuntimeError):
    """memtrace could not start, stop or snapshot a recording (the message says why)."""


class Recording:
    """A recording in progress: its output folder (`folder`), written completely by stop()."""

    def __init__(self, folder, collector, injector):
        self.folder = folder
        self._collector = collector
        self._injector = injector
        self._lock = threading.Lock()
        self._pid = os.getpid()  # a forked child shares the pipe, not the recording
        self._commands = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if _current is self:
            stop()
        return False

    def __repr__(self):
        return "<memtrace recording into %s>" % self.folder


_current = None
_recorded_into = None  # a process is recorded once: the injector's session cannot start again
_state_lock = threading.Lock()


def _forget_in_child():
    """A forked child is not recorded (its copy of the injector's session is forgotten too), and must
    never speak to its parent's collector."""
    global _current, _state_lock
    _current = None
    _state_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_in_child)


def _load_shim(library):
    """Starts memtrace's Python side with LIBRARY: Python frames, PyTorch's tracker and hooks, and
    what PyTorch's allocator holds now, as allocations live before recording started."""
    folder = os.path.join(bundle_dir(), "lib", "python", "_memtrace_shim")
    if "_memtrace_shim" not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            "_memtrace_shim", os.path.join(folder, "__init__.py"), submodule_search_locations=[folder])
        module = importlib.util.module_from_spec(spec)
        sys.modules["_memtrace_shim"] = module
        spec.loader.exec_module(module)
    sys.modules["_memtrace_shim"].recording_started(library)


def _collector_says(collector):
    line = collector.stdout.readline().decode(errors="replace").rstrip("\n")
    return line.split(" ", 1) if " " in line else (line, "")


def start(out=None, summary=True):
    """Starts recording this process's CUDA allocations into the folder OUT (default: a new
    memtrace-DATE-TIME in the current folder); returns the Recording. SUMMARY: memtrace's summary on
    stderr when it stops. Raises MemtraceError when it cannot: the process runs under `memtrace run`
    already, it was recorded once already, or CUPTI is held by another tool."""
    global _current, _recorded_into
    with _state_lock:
        if _current is not None:
            raise MemtraceError("memtrace is already recording this process (into %s)" % _current.folder)
        if _recorded_into is not None:
            raise MemtraceError("memtrace records a process once, and this one was recorded into %s" % _recorded_into)
        if os.environ.get("MEMTRACE_SOCKET"):
            raise MemtraceError("this process runs under `memtrace run`, which records all of it already")
        injector_path = os.path.join(bundle_dir(), "lib", "libmemtrace_inject.so")
        if not os.path.exists(injector_path):
            raise MemtraceError("memtrace's injector is missing from this installation (%s)" % injector_path)
        command = [executable(), "_record", "--pid", str(os.getpid())]
        if out is not None:
            command += ["-o", os.fspath(out)]
        if not summary:
            command.append("--no-summary")
        collector = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     start_new_session=True, close_fds=True)
        said = dict(_collector_says(collector) for _ in range(2))
        if "socket" not in said or "folder" not in said:
            collector.wait()
            raise MemtraceError("memtrace's collector could not start (its message above says why)")

        os.environ.update({"MEMTRACE_SOCKET": said["socket"], "MEMTRACE_BACKEND": "cupti",
                           "MEMTRACE_OUTPUT_DIR": said["folder"], "MEMTRACE_IN_PROCESS": "1"})
        try:
            injector = ctypes.PyDLL(injector_path, mode=os.RTLD_LOCAL | os.RTLD_NOW)
            injector.memtrace_record_start.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
            why = ctypes.create_string_buffer(1024)
            started = injector.memtrace_record_start(why, len(why)) == 0
        except OSError as e:  # the injector could not be loaded
            injector, started, why = None, False, ctypes.create_string_buffer(str(e).encode())
        finally:
            for name in _SETTINGS:
                os.environ.pop(name, None)
        if not started:
            collector.communicate(b"stop\n")
            raise MemtraceError("memtrace cannot record this process: " + why.value.decode(errors="replace"))
        try:
            _load_shim(injector)
        except Exception:
            pass  # Python frames and PyTorch's layer are missing; the calls are still recorded
        _current = Recording(said["folder"], collector, injector)
        _recorded_into = said["folder"]
        return _current


def stop():
    """Stops recording; returns the folder, its trace complete (memtrace report FOLDER)."""
    global _current
    with _state_lock:
        recording = _current
        if recording is None:
            raise MemtraceError("memtrace is not recording this process")
        _current = None  # whatever happens below, this recording is over
        try:
            sys.modules["_memtrace_shim"].recording_stopped()  # PyTorch's functions as they were
        except Exception:
            pass
        recording._injector.memtrace_record_stop()
        try:
            recording._collector.stdin.write(b"stop\n")
            recording._collector.stdin.close()
        except (BrokenPipeError, ValueError):
            pass  # the collector is gone already
        recording._collector.wait()
        return recording.folder


def _ask(command, answer, needs):
    """Sends COMMAND to the collector and returns its answer's text when it begins with ANSWER.
    Commands are numbered and answers carry the number: an answer left unread by a caller that
    was interrupted while it waited is passed over."""
    recording = _current
    if recording is None:
        raise MemtraceError("memtrace is not recording this process: %s needs memtrace.record()" % needs)
    with recording._lock:
        recording._commands += 1
        number = str(recording._commands)
        recording._collector.stdin.write(("%s %s\n" % (number, command)).encode())
        recording._collector.stdin.flush()
        while True:
            line = recording._collector.stdout.readline().decode(errors="replace").rstrip("\n")
            if not line:
                raise MemtraceError("memtrace's collector ended before it answered")
            said, _, text = line.partition(" ")
            if said == number:
                break
    what, _, rest = text.partition(" ")
    if what != answer:
        raise MemtraceError(rest if what == "failed" else text)
    return rest


def snapshot():
    """Writes a snapshot of what the process holds now, as memtrace's out-of-memory snapshots are
    written (memtrace snapshot PATH reads it); returns its path."""
    return _ask("snapshot", "snapshot", "memtrace.snapshot()")


def begin_window():
    """Starts measuring a stretch of the recording (end_window() says what it did); returns once
    the calls made from now on fall inside it."""
    _ask("window begin", "window", "begin_window()")


def end_window():
    """What the process did since begin_window(), once every call made before this one is in:
    {"reserved": {...}, "allocated": {...}, "allocated_layer": bool}, each layer with its
    peak_bytes (the most it held during the stretch), at_start_bytes, kept_bytes (allocated during
    the stretch and still held) and the largest sites_at_peak and kept_sites ({"bytes", "location"})."""
    return json.loads(_ask("window end", "window", "end_window()"))


def step():
    """Marks the start of a training step (memtrace.step, which memtrace leaks and check measure
    growth per step by), under `memtrace run` or memtrace.record; nothing when not recorded. Under
    `memtrace run` marks count once the process has used CUDA (a process that never does leaves no
    trace)."""
    recording = _current
    if recording is not None:
        injector = recording._injector
    elif os.environ.get("MEMTRACE_SOCKET"):  # under memtrace run: the preloaded injector's
        try:
            injector = ctypes.PyDLL(None)
            injector.memtrace_mark  # noqa: B018 (absent when this process is not traced after all)
        except (AttributeError, OSError):
            return
    else:
        return
    injector.memtrace_mark.argtypes = [ctypes.c_char_p]
    injector.memtrace_mark.restype = None
    injector.memtrace_mark(b"memtrace.step")


def record(out=None, summary=True):
    """`with memtrace.record("out/") as r:` records the CUDA allocations made inside the block
    into the folder (r.folder); see start()."""
    return start(out, summary)


@atexit.register
def _stop_at_exit():
    if _current is not None and _current._pid == os.getpid():
        try:
            stop()
        except Exception:
            pass
