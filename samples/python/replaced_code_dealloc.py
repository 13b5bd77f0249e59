"""Another tool puts back into PyCode_Type the tp_dealloc it found before memtrace wrapped it
(CPython's own code_dealloc): memtrace no longer hears of code objects' deaths, so it must stop
trusting its count of them, and each allocation still names its own function as code objects die
and others take their addresses. code_dealloc is a static function: its address comes from the
interpreter's symbol table (nm), which a stripped interpreter does not have ("no symbols", exit 3).

  replaced_code_dealloc.py COUNT
"""

import ctypes
import subprocess
import sys
import sysconfig
import time

import cuda


def symbol_values(path):
    out = subprocess.run(["nm", path], capture_output=True, text=True).stdout
    return {fields[2]: int(fields[0], 16) for fields in (line.split() for line in out.splitlines()) if len(fields) == 3}


def code_dealloc():
    """The address of CPython's code_dealloc in this process, or None."""
    library = sysconfig.get_config_var("LDLIBRARY")  # libpython3.X.so (a shared build) or .a
    path = "%s/%s.1.0" % (sysconfig.get_config_var("LIBDIR"), library) if library.endswith(".so") else sys.executable
    values = symbol_values(path)
    if "code_dealloc" not in values or "PyCode_Type" not in values:
        return None
    code_type = ctypes.addressof(ctypes.c_char.in_dll(ctypes.pythonapi, "PyCode_Type"))
    return code_type - values["PyCode_Type"] + values["code_dealloc"]


def main(count):
    original = code_dealloc()
    if original is None:
        print("no symbols")
        sys.exit(3)
    while "_memtrace_shim" not in sys.modules:  # memtrace's wrapper goes in as the shim starts
        time.sleep(0.01)
    # PyTypeObject: PyObject_VAR_HEAD (3 words), tp_name, tp_basicsize, tp_itemsize, tp_dealloc.
    code_type = ctypes.addressof(ctypes.c_char.in_dll(ctypes.pythonapi, "PyCode_Type"))
    slot = ctypes.c_void_p.from_address(code_type + 6 * ctypes.sizeof(ctypes.c_void_p))
    if slot.value == original:
        print("memtrace did not wrap code_dealloc")
        sys.exit(4)
    slot.value = original
    for i in range(count):
        source = "def f_%d():\n    return cuda.malloc(%d, hold_gil=False)\n" % (i, (1 << 20) + i * 4096)
        scope = {"cuda": cuda}
        exec(compile(source, "gen_%d.py" % i, "exec"), scope)
        cuda.free(scope["f_%d" % i]())
        del scope  # the function and its code object die; another may take the address
    print("done")


if __name__ == "__main__":
    main(int(sys.argv[1]))
