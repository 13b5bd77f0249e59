#!/usr/bin/env bash
# memtrace on a GPU with PyTorch, from the bundle (scripts/bundle), in under 5 minutes. Trains a
# small GPT-like model (gpt_train.py: random weights, nothing downloaded) with AdamW, with and
# without PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, then runs one that leaks a tensor per
# step and one that runs out of memory, and prints one table: memtrace's figures beside
# PyTorch's own (the peaks of allocated and reserved memory, the segments), the time per step
# without and with memtrace, the leak found with its line, whether the OOM snapshot names the line.
#
#   samples/gpu/check.sh          on the GPU, with the PyTorch of `python3` (or $PYTHON)
#   samples/gpu/check.sh --sim    the same plumbing on memtrace's simulated device, with the
#                                 training sample samples/python/torch_train.py (for its test)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
memtrace=${MEMTRACE:-}
for candidate in "$root/bin/memtrace" "$root/build/bin/memtrace"; do  # the bundle, or a source tree
  [ -z "$memtrace" ] && [ -x "$candidate" ] && memtrace=$candidate
done
if [ -z "$memtrace" ]; then
  echo "check.sh: no memtrace beside this script (run it from the bundle: scripts/bundle)" >&2
  exit 2
fi
python=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

sim=() bare_env=()
if [ "${1:-}" = --sim ]; then
  sim=(--sim --sim-capacity 4GiB)
  bare_env=("LD_LIBRARY_PATH=$(dirname "$memtrace")/../lib/sim${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
  model="$root/samples/python/torch_train.py"
  steps=(--steps 6)
else
  model="$here/gpt_train.py"
  steps=(--steps 8)
  if ! "$python" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    echo "check.sh: $python has no PyTorch with CUDA here" >&2
    exit 2
  fi
fi
[ -f "$model" ] || model="$here/$(basename "$model")"

# run NAME [ENV=VALUE...] -- ARGS...: the model bare and under memtrace; keeps their outputs.
run() {
  local name=$1 envs=()
  shift
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  env "${bare_env[@]}" "${envs[@]}" "$python" "$model" "$@" >"$work/$name.bare" 2>"$work/$name.bare.err"
  env "${envs[@]}" "$memtrace" run "${sim[@]}" -o "$work/$name" -- "$python" "$model" "$@" \
    >"$work/$name.out" 2>"$work/$name.err"
  echo $? >"$work/$name.status"
}

run default -- "${steps[@]}"
run expandable PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True -- "${steps[@]}"
run leak -- "${steps[@]}" --leak
run oom -- --steps 2 --oom

"$python" - "$work" "$memtrace" "$model" "${#sim[@]}" <<'PY'
import glob, json, os, subprocess, sys

work, memtrace, model = sys.argv[1:4]
simulated = sys.argv[4] != "0"  # step times on the simulated device say nothing of a GPU
rows, failed = [], []


def account(path):
    for line in open(path, errors="replace"):
        if line.startswith("memtrace-sample: "):
            return json.loads(line[len("memtrace-sample: "):])
    return None


def memtrace_json(*args):
    r = subprocess.run([memtrace, *args, "--json"], capture_output=True, text=True)
    return json.loads(r.stdout) if r.returncode == 0 and r.stdout.strip() else None


def marked_line(mark):
    for number, line in enumerate(open(model), 1):
        if line.rstrip().endswith("memtrace-test: " + mark):
            return number
    return None


def row(check, got, want, ok):
    rows.append((check, str(got), str(want), "ok" if ok else "MISMATCH"))
    if not ok:
        failed.append(check)


def mib(n):
    return f"{n / 2**20:.1f} MiB" if isinstance(n, (int, float)) else str(n)


for name in ("default", "expandable"):
    status = open(f"{work}/{name}.status").read().strip()
    traced, bare = account(f"{work}/{name}.out"), account(f"{work}/{name}.bare")
    if status != "0" or traced is None:
        row(f"{name}: the program under memtrace", f"exit {status}", "exit 0", False)
        sys.stderr.write(open(f"{work}/{name}.err").read()[-2000:])
        continue
    traces = f"{work}/{name}"
    alloc = memtrace_json("peak", "--layer", "allocated", traces)
    reserved = memtrace_json("peak", traces)
    report = memtrace_json("report", traces)
    a = alloc["processes"][0]["devices"][0]["peak_bytes"] if alloc and alloc["processes"][0]["devices"] else None
    r = reserved["processes"][0]["devices"][0]["peak_bytes"] if reserved else None
    row(f"{name}: peak allocated (max_memory_allocated)", a, traced["max_memory_allocated"],
        a == traced["max_memory_allocated"])
    row(f"{name}: peak reserved (max_memory_reserved)", r, traced["max_memory_reserved"],
        r == traced["max_memory_reserved"])
    events = report["processes"][0]["events"] if report else {}
    segments = sum(events.get(api, {}).get("calls", 0) for api in ("torch.segment_alloc", "torch.segment_map"))
    row(f"{name}: segments (segment.all.allocated)", segments, traced.get("segments_allocated"),
        segments == traced.get("segments_allocated"))
    for notice in report["processes"][0].get("notices", []) if report else []:
        row(f"{name}: notice", notice, "none", False)
    if bare:
        ratio = traced["step_ms"] / bare["step_ms"] if bare.get("step_ms") else float("nan")
        row(f"{name}: ms per step, with memtrace / without", f"{traced['step_ms']:.2f} / {bare['step_ms']:.2f}",
            "(simulated)" if simulated else "within 5%", simulated or ratio <= 1.05)

leaks = memtrace_json("leaks", f"{work}/leak")
leak_line = marked_line("leak")
growth = leaks["processes"][0]["growth"] if leaks else []
found = growth[0]["location"] if growth else "nothing"
want = f"{os.path.basename(model)}:{leak_line} in main"
row("leak: growing site (its line)", found, want, found == want)
if growth:
    row("leak: bytes per step", mib(growth[0]["bytes_per_step"]), "the tensor kept each step", True)

oom_snapshots = sorted(glob.glob(f"{work}/oom/*.memsnap"))
oom_account = account(f"{work}/oom.out")
row("oom: the program caught torch.cuda.OutOfMemoryError", oom_account and oom_account.get("oom_caught"), True,
    bool(oom_account and oom_account.get("oom_caught")))
if oom_snapshots:
    s = memtrace_json("snapshot", oom_snapshots[-1])
    location = s["request"]["location"] if s and s.get("request") else "no request"
    want = f"{os.path.basename(model)}:{marked_line('oom')} in main"
    row("oom: the snapshot names the line", location, want, location == want)
    row("oom: snapshot layers (reserved / allocated)", f"{mib(s['layers']['reserved'])} / {mib(s['layers']['allocated'])}",
        "both", s["layers"]["allocated"] is not None)
else:
    row("oom: a snapshot was written", "none", "oom-*.memsnap", False)

width = max(len(r[0]) for r in rows)
print(f"{'check':{width}}  {'memtrace':>24}  {'PyTorch / expected':>24}  verdict")
for check, got, want, verdict in rows:
    print(f"{check:{width}}  {got:>24}  {want:>24}  {verdict}")
print(f"\n{len(rows) - len(failed)} of {len(rows)} checks hold" + (": " + ", ".join(failed) if failed else ""))
sys.exit(1 if failed else 0)
PY
