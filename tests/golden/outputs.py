"""Every command's and every export's output on a set of traces, one file each, so that two builds
can be compared byte for byte (a change that should change no output: diff -r the two folders).

  python3 tests/golden/outputs.py MEMTRACE INPUTS OUT
    INPUTS: a folder of runs (one folder of traces each, as `memtrace run -o` leaves them) and
            PyTorch snapshot pickles; record.sh makes one
    OUT:    a new folder: <input>.<command>.txt (stdout, then the exit status) and the files the
            command writes
"""

import os
import subprocess
import sys

memtrace, inputs, out = (os.path.abspath(a) for a in sys.argv[1:4])
os.makedirs(out, exist_ok=True)

VIEWS = [
    ["report"], ["report", "--json"], ["report", "--by", "stack"],
    ["peak"], ["peak", "--json"], ["peak", "--layer", "allocated"], ["peak", "--layer", "allocated", "--json"],
    ["peak", "--layer", "device"], ["peak", "--by", "python"], ["peak", "--by", "native"], ["peak", "--by", "api"],
    ["peak", "--by", "category", "--json"], ["peak", "--top", "3"],
    ["leaks"], ["leaks", "--json"], ["leaks", "--by", "stack"],
    ["frag"], ["frag", "--json"],
    ["timeline"], ["timeline", "--json"], ["timeline", "--width", "40", "--from", "0", "--to", "step:2"],
    ["check", "--max-peak", "1GiB", "--max-leaked", "0", "--max-growth-per-step", "1KiB"],
    ["check", "--max-peak", "1GiB", "--json"],
    ["verify"], ["verify", "--json"],
    ["explain", "--model", "gpt2"], ["explain", "--model", "gpt2", "--json"],
]
EXPORTS = ["jsonl", "folded", "chrome", "perfetto", "memory-viz"]


def run(name, argv, files=()):
    r = subprocess.run([memtrace, *argv], capture_output=True, cwd=out)  # files it writes: named relative
    with open(os.path.join(out, name + ".txt"), "wb") as f:
        f.write(r.stdout + b"\n--- stderr\n" + r.stderr + b"\n--- exit %d\n" % r.returncode)


for entry in sorted(os.listdir(inputs)):
    path = os.path.join(inputs, entry)
    for args in VIEWS:
        run(f"{entry}.{'_'.join(a.strip('-') for a in args)}", args + [path])
    for fmt in EXPORTS:
        target = f"{entry}.export-{fmt}"
        run(f"{entry}.export_{fmt}", ["export", "--format", fmt, "-o", target, path])
    run(f"{entry}.timeline_files", ["timeline", "--svg", entry + ".svg", "--csv", entry + ".csv", path])
    run(f"{entry}.html", ["html", "-o", entry + ".html", path])
    for snap in sorted(os.listdir(path)) if os.path.isdir(path) else ():
        if snap.endswith(".memsnap"):
            for args in (["snapshot"], ["snapshot", "--json"]):
                run(f"{entry}.{snap}.{'_'.join(a.strip('-') for a in args)}", args + [os.path.join(path, snap)])
entries = sorted(os.listdir(inputs))
for a, b in zip(entries, entries[1:]):
    run(f"diff.{a}.{b}", ["diff", os.path.join(inputs, a), os.path.join(inputs, b)])
    run(f"diff.{a}.{b}.json", ["diff", "--json", os.path.join(inputs, a), os.path.join(inputs, b)])
    run(f"check.{a}.{b}", ["check", "--baseline", os.path.join(inputs, a), "--max-regression", "5",
                           "--junit", f"junit.{a}.{b}.xml", os.path.join(inputs, b)])
run("estimate", ["estimate", "--model", "llama-2-7b"])
run("estimate.json", ["estimate", "--model", "gpt2", "--mode", "infer", "--json"])
