"""Instructions per event, counted by callgrind: the stable measure on these machines, where wall
times move by 15-20% from run to run. Each figure is the difference between a run on 2N events
and one on N, divided by N, so start-up and exit cancel out. Prints a table and writes it to
FILE (default bench/INSTRUCTIONS.md).

  python3 bench/callgrind.py BUILD_DIR [--out FILE]

Recording: alloc_free_pairs (30 frames deep) on the simulated device, the whole process counted
(the simulated CUDA libraries and libc too: what memtrace makes them do is its cost as well),
with memtrace (stacks off, stacks on) and alone, and the collector (memtrace run) apart; python_stack_bench.py (15 Python calls deep,
ctypes.CDLL: the GIL released), ctypes' calls counted (memtrace's work is all inside them), with memtrace and alone;
torch_tensor_bench.py on the stand-in PyTorch, its trace tracker's calls counted. Analysis: `memtrace peak` and `memtrace leaks`
on trace_generator's traces, every thread counted. Needs valgrind."""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def instructions(argv, env=None):
    """The instructions callgrind counted for ARGV (its program, under valgrind somewhere in ARGV)."""
    r = subprocess.run(argv, env=env, capture_output=True, text=True)
    refs = re.findall(r"I\s+refs:\s+([\d,]+)", r.stderr)
    if r.returncode != 0 or not refs:
        sys.exit(f"callgrind.py: {' '.join(argv)} failed ({r.returncode}):\n{r.stderr[-2000:]}")
    return sum(int(n.replace(",", "")) for n in refs)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("build")
    parser.add_argument("--out", default=os.path.join(ROOT, "bench", "INSTRUCTIONS.md"))
    args = parser.parse_args()
    if not shutil.which("valgrind"):
        sys.exit("callgrind.py: needs valgrind (apt-get install valgrind)")
    build = os.path.abspath(args.build)
    memtrace = f"{build}/bin/memtrace"
    work = tempfile.mkdtemp(prefix="memtrace-callgrind-")
    callgrind = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
    # Device memory is sampled once a wall-clock millisecond: under valgrind's slowdown that would
    # be every few allocations, and move with the machine's speed. Once an hour, the count is the
    # calls' own.
    env = dict(os.environ, MEMTRACE_SIM_UNBACKED="1", MEMTRACE_SAMPLE_INTERVAL_US="3600000000",
               LD_LIBRARY_PATH=f"{build}/lib/sim" + (":" + os.environ["LD_LIBRARY_PATH"]
                                                     if os.environ.get("LD_LIBRARY_PATH") else ""))
    rows, started = [], time.time()
    try:
        pairs = 20_000
        # alloc_free_pairs makes a tenth as many first, to warm up: the 2N run makes this many more.
        made = (2 * pairs + 2 * pairs // 10) - (pairs + pairs // 10)
        program = lambda n: [*callgrind, f"{build}/bin/alloc_free_pairs", "--pairs", str(n)]
        per_pair = {}
        for name, options in (("alone", None), ("stacks off", ["--no-native-stacks", "--no-python-stacks"]),
                              ("stacks on", [])):
            counts = []
            for n in (pairs, 2 * pairs):
                if options is None:
                    counts.append(instructions(program(n), env))
                else:
                    out = os.path.join(work, f"rec-{len(counts)}")
                    shutil.rmtree(out, ignore_errors=True)
                    counts.append(instructions([memtrace, "run", "--sim", *options, "-o", out, "--", *program(n)], env))
            per_pair[name] = (counts[1] - counts[0]) / made
        for name in ("stacks off", "stacks on"):
            rows.append((f"recording, {name}: memtrace's added instructions per event (an allocation or a free)",
                         f"{(per_pair[name] - per_pair['alone']) / 2:.0f}",
                         f"alloc_free_pairs alone: {per_pair['alone'] / 2:.0f} per event"))
        # The collector (memtrace run itself, every thread; valgrind does not follow the program):
        # what it spends on each event the program hands it, on the program's machine.
        for name, options in (("stacks off", ["--no-native-stacks", "--no-python-stacks"]), ("stacks on", [])):
            counts = []
            for n in (pairs, 2 * pairs):
                out = os.path.join(work, f"col-{len(counts)}")
                shutil.rmtree(out, ignore_errors=True)
                counts.append(instructions([*callgrind, memtrace, "run", "--sim", *options, "--max-stall", "600s",
                                            "-o", out, "--", f"{build}/bin/alloc_free_pairs", "--pairs", str(n)], env))
            rows.append((f"recording, {name}: the collector's instructions per event (every thread)",
                         f"{(counts[1] - counts[0]) / made / 2:.0f}", "memtrace run on alloc_free_pairs"))
        # python_stack_bench makes 3 x CALLS allocations (and 1,000 first, which cancel out). Only the
        # calls ctypes makes are counted (_ctypes_callproc: libffi, memtrace's interposer, the runtime):
        # the interpreter's own count moves by thousands of instructions an allocation from run to run.
        # 20k calls first: the Python shim is ready well before (until then frames are not read).
        calls = 20_000
        script = lambda n: [*callgrind[:2], "--toggle-collect=_ctypes_callproc", *callgrind[2:], sys.executable,
                            f"{ROOT}/bench/python_stack_bench.py", str(n), "released"]
        per_call = {}
        for name, traced in (("alone", False), ("stacks on", True)):
            counts = []
            for n in (calls, 2 * calls):
                if traced:
                    out = os.path.join(work, f"py-{len(counts)}")
                    shutil.rmtree(out, ignore_errors=True)
                    counts.append(instructions([memtrace, "run", "--sim", "-o", out, "--", *script(n)], env))
                else:
                    counts.append(instructions(script(n), env))
            per_call[name] = (counts[1] - counts[0]) / (3 * calls)
        rows.append(("recording, Python 15 deep, GIL released, stacks on: memtrace's added instructions per allocation",
                     f"{per_call['stacks on'] - per_call['alone']:.0f}",
                     f"python_stack_bench.py alone: {per_call['alone']:.0f} per allocation inside ctypes' calls"))
        # torch_tensor_bench (row 11) makes N tensors (and 64 first, which cancel out): only PyTorch's
        # trace tracker is counted (memtrace's callback: the stand-in PyTorch calls none without
        # memtrace, so all of it is memtrace's), for an allocation and a free a tensor.
        tensors = 20_000
        torch_env = dict(env, PYTHONPATH=f"{build}/lib/sim/torch/site-packages")
        counts = []
        for n in (tensors, 2 * tensors):
            out = os.path.join(work, f"torch-{len(counts)}")
            counts.append(instructions([memtrace, "run", "--sim", "-o", out, "--", *callgrind[:2],
                                        "--toggle-collect=*on_trace_entry*", *callgrind[2:], sys.executable,
                                        f"{ROOT}/bench/torch_tensor_bench.py", str(n)], torch_env))
        version = ".".join(str(v) for v in sys.version_info[:2])
        rows.append(("recording, PyTorch tensors 15 deep (the allocated layer), stacks on: memtrace's instructions per "
                     f"tensor", f"{(counts[1] - counts[0]) / tensors:.0f}",
                     f"torch_tensor_bench.py on the stand-in PyTorch, Python {version}: its trace tracker's calls "
                     "(an allocation and a free)"))
        events = 1_000_000
        traces = []
        for n in (events, 2 * events):
            trace = os.path.join(work, f"t{n}.memtrace")
            subprocess.run([f"{build}/bin/trace_generator", trace, "--events", str(n)], check=True,
                           capture_output=True)
            traces.append(trace)
        for command in ("peak", "leaks"):
            counts = [instructions([*callgrind, memtrace, command, t]) for t in traces]
            rows.append((f"analysis: memtrace {command}, instructions per event", f"{(counts[1] - counts[0]) / events:.0f}",
                         "trace_generator traces, every thread"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    lines = ["| measure | instructions | note |", "|---|---|---|"] + [f"| {a} | {b} | {c} |" for a, b, c in rows]
    table = "\n".join(lines)
    print(table)
    with open(args.out, "w") as f:
        f.write("# Instructions per event (callgrind)\n\n")
        f.write(f"`python3 bench/callgrind.py BUILD` on {time.strftime('%Y-%m-%d')}, "
                f"{(time.time() - started) / 60:.1f} minutes: the difference between runs on 2N and N events, "
                "over N. Stable from run to run, unlike wall times; the steps that changed them, with "
                "their figures before and after, are in the closing notes of the issues that made them.\n\n")
        f.write(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
