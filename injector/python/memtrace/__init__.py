"""memtrace: a GPU memory profiler for CUDA programs.

From the command line (installed with this package):  memtrace run -- python train.py
From inside Python:  with memtrace.record("out/"): ...   (also start(), stop(), snapshot())
Steps, for growth per step:  memtrace.step() at the start of each (under either)
The executable and the libraries it loads into traced programs come with the package (its wheel
holds the relocatable bundle in memtrace/_bundle); in a build tree they are the build's own.
"""

import os

__all__ = ["__version__", "executable", "bundle_dir", "MemtraceError", "Recording", "record", "start", "stop",
           "snapshot", "step", "begin_window", "end_window"]


def bundle_dir():
    """The folder holding bin/memtrace and lib/: the wheel's bundle, or the build tree this package
    was copied into (<build>/lib/python/memtrace), wherever a link to the package stands."""
    here = os.path.dirname(os.path.realpath(__file__))
    bundled = os.path.join(here, "_bundle")
    if os.path.isdir(bundled):
        return bundled
    return os.path.dirname(os.path.dirname(os.path.dirname(here)))


def executable():
    """The memtrace executable's path."""
    return os.path.join(bundle_dir(), "bin", "memtrace")


def _read_version():
    try:
        from ._version import version  # written into the wheel by scripts/wheel
        return version
    except ImportError:
        return "unknown"


__version__ = _read_version()

from .recording import (MemtraceError, Recording, begin_window, end_window, record, snapshot, start,  # noqa: E402
                        step, stop)
