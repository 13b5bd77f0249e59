"""memtrace's pytest plugin (the wheel's pytest11 entry point, named memtrace; -p no:memtrace turns
it off). `pytest --memtrace` records the GPU memory of the whole session from inside the test
process (memtrace.record: one recording, each test measured as it ends), and two markers hold tests
to limits, as pytest-memray's do for host memory:

    @pytest.mark.gpu_limit_memory("2 GiB")                     # the most reserved memory held during the test
    @pytest.mark.gpu_limit_memory("1 GiB", layer="allocated")  # the most PyTorch's tensors held
    @pytest.mark.gpu_limit_leaks("16 MiB")                     # what it allocated and still holds at its end

A test over a limit fails with the figures and its largest sites. The session's trace stays in
--memtrace-dir (default: a new memtrace-DATE-TIME folder) for memtrace report, leaks and html.
Without --memtrace the markers do nothing.
"""

import os

import pytest

import memtrace
import memtrace.recording
from memtrace import units

_LAYERS = {"reserved": "reserved memory", "allocated": "allocated memory (PyTorch's tensors)"}


def parse_size(limit):
    size = units.parse_size(limit)
    if size is None:
        raise pytest.UsageError("memtrace: %r is not a size (try 2 GiB, 512MiB, 1.5GB)" % (limit,))
    return size


format_bytes = units.format_bytes


def pytest_addoption(parser):
    group = parser.getgroup("memtrace", "GPU memory (memtrace)")
    group.addoption("--memtrace", action="store_true", default=False,
                    help="Record each test's GPU memory with memtrace and hold the gpu_limit_* markers")
    group.addoption("--memtrace-dir", default=None, metavar="DIR",
                    help="Folder for the session's trace (default: a new memtrace-DATE-TIME)")


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu_limit_memory(limit, layer='reserved'): with --memtrace, fail the test "
                                       "when the most GPU memory held during it exceeds LIMIT ('2 GiB')")
    config.addinivalue_line("markers", "gpu_limit_leaks(limit, layer=None): with --memtrace, fail the test when "
                                       "what it allocated and still holds at its end exceeds LIMIT ('16 MiB'); "
                                       "in PyTorch's tensors when recorded, else in reserved memory")
    if config.getoption("memtrace"):
        config.pluginmanager.register(SessionRecording(config), "memtrace-session")


class SessionRecording:
    def __init__(self, config):
        self.config = config
        self.folder = None
        self.broken = {}  # test id -> what its limits say

    def pytest_sessionstart(self, session):
        # With pytest-xdist the workers run the tests: each records itself, the controller nothing.
        if self.config.pluginmanager.hasplugin("dsession"):
            return
        folder = self.config.getoption("memtrace_dir")
        worker = getattr(self.config, "workerinput", {}).get("workerid")
        if folder and worker:
            folder = os.path.join(folder, worker)
        try:
            self.folder = memtrace.start(folder, summary=False).folder
        except memtrace.MemtraceError as e:
            raise pytest.UsageError("pytest --memtrace: %s" % e)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item):
        # Measured here, judged in pytest_runtest_makereport: nothing is raised into pytest's own
        # wrappers of the call.
        measured = None
        if self.folder is not None:
            try:
                memtrace.begin_window()
            except memtrace.MemtraceError:
                pass
        yield
        if self.folder is not None:
            try:
                measured = memtrace.end_window()
            except memtrace.MemtraceError as e:
                self.broken[item.nodeid] = "memtrace: the test could not be measured: %s" % e
        if measured is not None:
            try:
                broken = [text for text in (_check_memory(item, measured), _check_leaks(item, measured)) if text]
            except pytest.UsageError as e:  # a marker written wrong
                broken = [str(e)]
            if broken:
                self.broken[item.nodeid] = "\n\n".join(broken)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        broken = self.broken.pop(item.nodeid, None) if call.when == "call" else None
        if broken and report.passed:  # a test that failed already keeps its own failure
            report.outcome = "failed"
            report.longrepr = broken

    def pytest_sessionfinish(self, session):
        if self.folder is not None and memtrace.recording._current is not None:
            memtrace.stop()

    def pytest_terminal_summary(self, terminalreporter):
        if self.folder is not None:
            terminalreporter.write_line("memtrace: the session's trace is in %s (memtrace report %s)"
                                        % (self.folder, self.folder))


def _marker(item, name):
    marker = item.get_closest_marker(name)
    if marker is None:
        return None
    if not marker.args and "limit" not in marker.kwargs:
        raise pytest.UsageError("memtrace: %s needs a limit, as in @pytest.mark.%s(\"16 MiB\")" % (name, name))
    limit = parse_size(marker.kwargs.get("limit", marker.args[0] if marker.args else None))
    layer = marker.kwargs.get("layer", marker.args[1] if len(marker.args) > 1 else None)
    if layer is not None and layer not in _LAYERS:
        raise pytest.UsageError("memtrace: %s: layer=%r: say 'reserved' or 'allocated'" % (name, layer))
    return limit, layer


def _sites(sites, heading):
    lines = ["  " + heading]
    lines += ["    %10s  %s" % (format_bytes(s["bytes"]), s["location"]) for s in sites]
    return "\n".join(lines) if sites else "  (no sites: memtrace saw no allocation behind it)"


def _check_memory(item, measured):
    wanted = _marker(item, "gpu_limit_memory")
    if wanted is None:
        return None
    limit, layer = wanted[0], wanted[1] or "reserved"
    if layer == "allocated" and not measured["allocated_layer"]:
        return ("memtrace: gpu_limit_memory(layer='allocated') cannot be measured: no allocated layer was recorded "
                "(PyTorch's caching allocator was not seen)")
    m = measured[layer]
    if m["peak_bytes"] <= limit:
        return None
    return ("memtrace: the test held %s of %s at its peak, over its limit of %s (gpu_limit_memory); %s of it "
            "was held when it started\n%s" % (format_bytes(m["peak_bytes"]), _LAYERS[layer], format_bytes(limit),
                                               format_bytes(m["at_start_bytes"]),
                                               _sites(m["sites_at_peak"], "largest sites at the peak:")))


def _check_leaks(item, measured):
    wanted = _marker(item, "gpu_limit_leaks")
    if wanted is None:
        return None
    limit, layer = wanted[0], wanted[1] or ("allocated" if measured["allocated_layer"] else "reserved")
    m = measured[layer]
    if m["kept_bytes"] <= limit:
        return None
    return ("memtrace: the test allocated %s of %s that it still holds at its end, over its limit of %s "
            "(gpu_limit_leaks)\n%s" % (format_bytes(m["kept_bytes"]), _LAYERS[layer], format_bytes(limit),
                                      _sites(m["kept_sites"], "what it still holds, largest first:")))
