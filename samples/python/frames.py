"""Where Python allocations come from, in every shape Python code takes, with the GIL held and
released. Each allocation has a size of its own, so the tests can tell them apart:

  1 MiB + 16 / + 32  the same line through ctypes.PyDLL (GIL held) and ctypes.CDLL (released)
  2 MiB              a C extension that releases the GIL (argv[1]: the folder holding it)
  3, 4, 5 MiB        a generator, a coroutine, a lambda
  6 MiB              code run by exec, compiled as "generated.py"
  7 MiB              a native thread of the extension's (no Python frames)
  8 MiB              60 Python calls deep
  9 MiB + k * 64 KiB worker k of four threading workers, while the main thread runs Python
  10 MiB + i * 4 KiB  function f_i, exec'd, called, then dropped (its code object dies)
  11 MiB             an installed package's code (site-packages) called from through_library, kept
                     to the end (the one allocation live then)
  12 MiB + i * 4 KiB  cell i of a notebook: module code exec'd as Jupyter runs a cell, each cell
                     the same shape, so its code object often takes the last cell's address, and its
                     frame stands where the last one stood
  13 MiB + i * 4 KiB  the same, the cells' file names differing only in their middle

With "deep" as argv[2], only the deep one.
"""

import os
import sys
import tempfile
import threading

import cuda

MiB = 1 << 20


def ctypes_both():
    for hold in (True, False):
        cuda.free(cuda.malloc(MiB + (16 if hold else 32), hold_gil=hold))  # memtrace-test: frames-ctypes


def extension(ext):
    ext.free(ext.allocate(2 * MiB))  # memtrace-test: frames-ext


def generator():
    yield cuda.malloc(3 * MiB, hold_gil=False)  # memtrace-test: frames-generator


async def coroutine():
    return cuda.malloc(4 * MiB, hold_gil=False)  # memtrace-test: frames-coroutine


def run_coroutine():
    try:
        coroutine().send(None)  # memtrace-test: frames-run-coroutine
    except StopIteration as done:
        return done.value


def shapes():
    cuda.free(next(generator()))
    cuda.free(run_coroutine())
    cuda.free((lambda: cuda.malloc(5 * MiB, hold_gil=False))())  # memtrace-test: frames-lambda
    scope = {"cuda": cuda, "MiB": MiB}
    exec(compile("buffer = cuda.malloc(6 * MiB, hold_gil=False)\n", "generated.py", "exec"), scope)  # memtrace-test: frames-exec
    cuda.free(scope["buffer"])


def deep(levels):
    if levels:
        return deep(levels - 1)  # memtrace-test: frames-recurse
    cuda.free(cuda.malloc(8 * MiB, hold_gil=False))  # memtrace-test: frames-deep


def worker(k, stop):
    for _ in range(20):
        cuda.free(cuda.malloc(9 * MiB + k * 64 * 1024, hold_gil=False))  # memtrace-test: frames-worker
    stop.append(k)


def threads():
    stop = []
    workers = [threading.Thread(target=worker, args=(k, stop)) for k in range(4)]
    for w in workers:
        w.start()
    busy = 0
    while len(stop) < len(workers):  # the main thread runs Python meanwhile
        busy += sum(range(100))
    for w in workers:
        w.join()


def reused_code():
    for i in range(200):
        source = "def f_%d():\n    return cuda.malloc(%d, hold_gil=False)\n" % (i, 10 * MiB + i * 4096)
        scope = {"cuda": cuda}
        exec(compile(source, "gen_%d.py" % i, "exec"), scope)
        cuda.free(scope["f_%d" % i]())
        del scope  # the function and its code object die; another may take the address


def notebook_cells(size, name):
    scope = {"cuda": cuda}
    for i in range(200):
        cell = compile("cuda.free(cuda.malloc(%d, hold_gil=False))\n" % (size + i * 4096), name % i, "exec")
        exec(cell, scope)  # memtrace-test: frames-cell
        del cell  # the cell's code dies; the next cell's may take its address


def through_library():
    root = tempfile.mkdtemp()
    package = os.path.join(root, "site-packages", "fakelib")
    os.makedirs(package)
    with open(os.path.join(package, "__init__.py"), "w") as f:
        f.write("import ctypes\n"
                "_lib = ctypes.CDLL('libcudart.so.13')\n"
                "def allocate(n):\n"
                "    p = ctypes.c_void_p()\n"
                "    _lib.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(n))\n"
                "    return p\n")
    sys.path.insert(0, os.path.join(root, "site-packages"))
    import fakelib
    fakelib.allocate(11 * MiB)  # memtrace-test: frames-library


def main():
    if len(sys.argv) > 2 and sys.argv[2] == "deep":
        deep(60)
        return
    sys.path.insert(0, sys.argv[1])
    import memtrace_ext
    ctypes_both()  # memtrace-test: frames-main-ctypes
    extension(memtrace_ext)
    shapes()
    memtrace_ext.native_thread_allocate(7 * MiB)
    deep(60)
    threads()
    reused_code()
    notebook_cells(12 * MiB, "cell_%d.py")
    notebook_cells(13 * MiB, "notebook/cell_%03d/main.py")
    through_library()


if __name__ == "__main__":
    main()
