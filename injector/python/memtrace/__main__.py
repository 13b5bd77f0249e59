"""`memtrace ...` as pip installs it (a console script) and `python -m memtrace ...`: the memtrace
executable in the package's bundle, run in this process's place so that its exit status, signals
and terminal are the program's own."""

import os
import sys

from . import executable


def main():
    path = executable()
    if not os.access(path, os.X_OK):
        sys.stderr.write("memtrace: the memtrace executable is missing from this installation (%s)\n" % path)
        return 125
    os.execv(path, [path] + sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
