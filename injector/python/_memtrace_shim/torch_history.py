"""PyTorch's own recorder, where memtrace cannot attach to its allocator live (2.1 has no trace
tracker; 2.2 to 2.5 hide the class memtrace finds it by): torch.cuda.memory._record_memory_history
(its ring of the allocator's events, with their Python frames), switched on when PyTorch
initializes CUDA, and read (torch.cuda.memory._snapshot) at exit, at each out-of-memory and when
asked. What each reading adds since the one before is written beside the trace as
<pid>.torch-history-<n>.pickle (the name format/run_folder.h gives it), with the clocks then;
the collector merges them into the trace on memtrace's clock when the process ends
(analysis/importers/torch_history.cpp).
"""

import os
import pickle
import time

# Entries kept by PyTorch's ring: enough for long runs between readings, bounded in memory (an
# entry with its Python frames is some hundreds of bytes).
DEFAULT_MAX_ENTRIES = 1_000_000


class History:
    def __init__(self, torch, folder, max_entries):
        self.torch, self.folder = torch, folder
        try:
            self.mode = int(os.environ.get("MEMTRACE_FILE_MODE", "600"), 8) & 0o666
        except ValueError:
            self.mode = 0o600
        self.collections = 0
        self.last = {}  # device -> the last entry written
        torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="python",
                                                 max_entries=max_entries)

    def collect(self, when):
        """Writes what PyTorch recorded since the last reading."""
        snapshot = self.torch.cuda.memory._snapshot()
        traces, lost = [], 0
        for device, trace in enumerate(snapshot.get("device_traces", [])):
            start = 0
            last = self.last.get(device)
            if last is not None:
                start = next((i + 1 for i in range(len(trace) - 1, -1, -1) if trace[i] == last), None)
                if start is None:  # the ring went round past it: what fell out is lost
                    start, lost = 0, lost + 1
            traces.append(trace[start:])
            if trace:
                self.last[device] = trace[-1]
        self.collections += 1
        data = {"segments": snapshot.get("segments", []) if self.collections == 1 else [],
                "device_traces": traces,
                "memtrace_clock": {"realtime_ns": time.time_ns(), "monotonic_ns": time.monotonic_ns()},
                "memtrace_when": when,
                "memtrace_ring_wrapped": lost}
        name = f"{os.getpid()}.torch-history-{self.collections}.pickle"
        # Made new (O_EXCL, no link followed, 0600 meanwhile), given the traces' mode (memtrace
        # says it; 0600 when it does not), then renamed into place.
        part = os.path.join(self.folder, f"{name}.{os.urandom(6).hex()}.part")
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            with os.fdopen(fd, "wb") as f:
                os.fchmod(f.fileno(), self.mode)
                pickle.dump(data, f, protocol=4)
            os.rename(part, os.path.join(self.folder, name))
        except BaseException:
            try:
                os.unlink(part)
            except OSError:
                pass
            raise


def start(torch, injector):
    """Switches PyTorch's recorder on; None where it cannot be (the trace then says why)."""
    folder = os.environ.get("MEMTRACE_OUTPUT_DIR")
    try:
        if not folder:
            raise RuntimeError("memtrace gave this process no output folder")
        entries = int(os.environ.get("MEMTRACE_TORCH_HISTORY_ENTRIES", DEFAULT_MAX_ENTRIES))
        return History(torch, folder, entries)
    except Exception as e:
        injector.notice(f"PyTorch's own recorder could not be started ({e}): the allocated layer is not "
                        "recorded".encode())
        return None
