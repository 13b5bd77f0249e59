#!/usr/bin/env bash
# memtrace on a GPU with PyTorch, from the bundle (scripts/bundle), in under 5 minutes. Trains a
# small GPT-like model (gpt_train.py: random weights, nothing downloaded) with AdamW, with and
# without PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, then runs one that leaks a tensor per
# step and one that runs out of memory, and prints one table: memtrace's figures beside
# PyTorch's own (the peaks of allocated and reserved memory, the segments), the time per step
# without and with memtrace, the leak found with its line, whether the OOM snapshot names the line;
# with PyTorch's cudaMallocAsync backend (no trace tracker: the program must run as without memtrace);
# then the same training through CUPTI's callbacks alone (--backend cupti), with --verify against
# CUPTI's own records, and a program linked with NVIDIA's static runtime (static_runtime_nvidia),
# whose allocations must all be recorded, through CUPTI and through dlsym; the training's CUDA calls
# per API the same under --backend preload, cupti and auto; last, CUDA graphs' memory nodes
# (graph_memory: what graphs reserve shows in the device layer; graph_nodes: made through the
# generic node API), memory shared between processes (sharing: IPC and shareable handles, pool
# pointers, multicast), every call recorded; and the training joined while it runs (memtrace
# attach) and left. The default training's owners at its peak add up to the device layer, and
# NVML's figure for the process is shown beside them; `memtrace whatif` predicts the expandable
# segments' run from the default one.
#
#   samples/gpu/check.sh          on the GPU, with the PyTorch of `python3` (or $PYTHON)
#   samples/gpu/check.sh --sim    the same plumbing on memtrace's simulated device, with the
#                                 training sample samples/python/torch_train.py on the stand-in
#                                 PyTorch (for its test)
# The traces stay in $MEMTRACE_CHECK_DIR (default: a new /tmp/memtrace-check.XXXXXX), named by run.
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
# The traces are kept, to read with memtrace's commands afterwards.
work=${MEMTRACE_CHECK_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/memtrace-check.XXXXXX")}
mkdir -p "$work"
if [ -n "$(ls -A "$work")" ]; then  # memtrace run would refuse every folder an earlier check left
  echo "check.sh: $work holds an earlier check's traces: name an empty or new folder (MEMTRACE_CHECK_DIR)" >&2
  exit 2
fi

sim=() bare_env=()
if [ "${1:-}" = --sim ]; then
  sim=(--sim --sim-capacity 4GiB)
  bare_env=("LD_LIBRARY_PATH=$(dirname "$memtrace")/../lib/sim${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
  # The stand-in PyTorch (sim/torch), which drives the simulated device as PyTorch drives a GPU: in
  # the bundle's lib/sim/torch, or a build tree's. Ahead of any PyTorch installed (a CPU-only one
  # has no CUDA to record).
  stand_in="$(dirname "$memtrace")/../lib/sim/torch/site-packages"
  if [ ! -d "$stand_in" ]; then
    echo "check.sh: --sim needs the stand-in PyTorch at $stand_in (scripts/bundle puts it there)" >&2
    exit 2
  fi
  export PYTHONPATH="$(cd "$stand_in" && pwd)${PYTHONPATH:+:$PYTHONPATH}"
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

# run_memtrace NAME MEMTRACE-OPTIONS... -- CMD...: CMD under memtrace only; keeps its output.
run_memtrace() {
  local name=$1 options=()
  shift
  while [ "$1" != -- ]; do options+=("$1"); shift; done
  shift
  "$memtrace" run "${sim[@]}" "${options[@]}" -o "$work/$name" -- "$@" >"$work/$name.out" 2>"$work/$name.err"
  echo $? >"$work/$name.status"
}

run default -- "${steps[@]}"
run expandable PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True -- "${steps[@]}"
run async PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync -- "${steps[@]}"
run leak -- "${steps[@]}" --leak
run oom -- --steps 2 --oom
# CUPTI's callbacks alone; CUPTI's own records held against what was recorded; a program linked
# with the CUDA runtime statically (nvcc's default), seen through CUPTI (auto) and through dlsym
# (preload).
run_memtrace cupti --backend cupti -- "$python" "$model" "${steps[@]}"
run_memtrace preload --backend preload -- "$python" "$model" "${steps[@]}"
run_memtrace auto --backend auto -- "$python" "$model" "${steps[@]}"
run_memtrace verify --verify -- "$python" "$model" "${steps[@]}"
static=""
for candidate in "$here/static_runtime_nvidia" "$root/build/samples/static_runtime_nvidia"; do
  [ -z "$static" ] && [ -x "$candidate" ] && static=$candidate
done
if [ ${#sim[@]} -gt 0 ]; then  # NVIDIA's static runtime needs a GPU: the simulated runtime's archive
  static=""
  for candidate in "$here/static_runtime" "$root/build/samples/static_runtime"; do
    [ -z "$static" ] && [ -x "$candidate" ] && static=$candidate
  done
fi
if [ -n "$static" ]; then
  run_memtrace static_auto --backend auto -- "$static"
  run_memtrace static_preload --backend preload -- "$static"
fi
# Graph memory and sharing, linked with the CUDA runtime dynamically: on a GPU machine without the
# toolkit, the runtime PyTorch's wheels carry serves them.
if [ ${#sim[@]} -eq 0 ]; then
  cudart=$("$python" -c 'import glob, os, sys
hits = [h for base in sys.path for h in glob.glob(os.path.join(base, "nvidia", "*", "lib", "libcudart.so.1*"))]
print(os.path.dirname(hits[0]) if hits else "")' 2>/dev/null)
  [ -n "$cudart" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$cudart"
fi
shared=()
# memtrace attach: the training joined while it runs (until a file exists), recorded for 3 s, left.
rm -f "$work/attach.stop"
env "${bare_env[@]}" "$python" "$model" --until "$work/attach.stop" >"$work/attach.job" 2>"$work/attach.job.err" &
job=$!
until grep -q "ready pid" "$work/attach.job" 2>/dev/null || ! kill -0 "$job" 2>/dev/null; do sleep 0.1; done
"$memtrace" attach "$job" -o "$work/attach" --for 3s >"$work/attach.out" 2>"$work/attach.err"
echo $? >"$work/attach.status"
touch "$work/attach.stop"
wait "$job"
echo $? >"$work/attach.job.status"

for sample in graph_memory graph_nodes sharing; do
  for candidate in "$here/$sample" "$root/build/samples/$sample"; do
    if [ -x "$candidate" ]; then
      run_memtrace "$sample" -- env MEMTRACE_SAMPLE_INTERVAL_US=0 "$candidate"
      shared+=("$sample")
      break
    fi
  done
done

"$python" - "$work" "$memtrace" "$model" "${#sim[@]}" "$static" "${shared[*]}" <<'PY'
import glob, json, os, subprocess, sys

work, memtrace, model = sys.argv[1:4]
simulated = sys.argv[4] != "0"  # step times on the simulated device say nothing of a GPU
static = sys.argv[5]
shared = sys.argv[6].split()
rows, failed = [], []


def account(path):
    if not os.path.exists(path):
        return None
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


def attach_path(process):
    """How the allocated layer was recorded: PyTorch's trace tracker (live), PyTorch's own recorder
    (its history, merged at exit), or not at all."""
    notices = " ".join(process.get("notices", []))
    if "own recorder" in notices:
        return "PyTorch's own recorder"
    if process.get("events", {}).get("torch.alloc"):
        return "PyTorch's trace tracker"
    return "none"


def is_allocation(api):
    return ("Malloc" in api or "Alloc" in api) and not api.startswith("torch")


for name in ("default", "expandable", "cupti"):
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
    p = report["processes"][0] if report else {}
    events = p.get("events", {})
    row(f"{name}: allocated layer recorded by", attach_path(p), "PyTorch's trace tracker",
        attach_path(p) == "PyTorch's trace tracker")
    # memtrace's figures beside memory_stats()'s: requested (what tensors asked for: memtrace's
    # allocated layer), allocated (PyTorch's blocks: the requests rounded up), reserved.
    row(f"{name}: peak requested (requested_bytes.all.peak)", a, traced["max_memory_requested"],
        a == traced["max_memory_requested"])
    row(f"{name}: peak allocated (allocated_bytes.all.peak, blocks)", a, traced["max_memory_allocated"],
        a is not None and traced["max_memory_allocated"] >= a)
    # memtrace's reserved layer holds every allocation call, PyTorch's reserved_bytes only its
    # allocator's segments: on a GPU, cuBLAS allocates its own workspace with cudaMalloc at each
    # cublasCreate (64 MiB and 129 KiB on an H200 with cuBLAS 13, a handle per thread that runs
    # matrix products: the autograd thread has its own). So PyTorch's figure is held against
    # memtrace's peak of PyTorch's segments, and the rest is shown.
    checks = (reserved["processes"][0]["devices"][0].get("pytorch_counters") or {}).get("checks", []) \
        if reserved and reserved["processes"][0]["devices"] else []
    segments_peak = next((c["memtrace"] for c in checks if c["figure"] == "reserved_bytes.all.peak"), None)
    row(f"{name}: peak reserved in PyTorch's segments (reserved_bytes.all.peak)", segments_peak,
        traced["max_memory_reserved"], segments_peak == traced["max_memory_reserved"])
    outside = r - segments_peak if r is not None and segments_peak is not None else None
    row(f"{name}: peak reserved, all allocation calls: beyond PyTorch's segments", mib(outside),
        "its libraries' own (cuBLAS)", outside is not None and outside >= 0)
    counters = [c for c in p.get("pytorch_counters", []) if c["when"] == "exit"]
    row(f"{name}: PyTorch's counters at exit, held against memtrace's", "agree" if counters and all(
        c["agrees"] for c in counters) else ("disagree" if counters else "not recorded"), "agree",
        bool(counters) and all(c["agrees"] for c in counters))
    segments = events.get("torch.segment_alloc", {}).get("calls", 0)  # expandable segments' maps are no segment
    row(f"{name}: segments (segment.all.allocated)", segments, traced.get("segments_allocated"),
        segments == traced.get("segments_allocated"))
    for notice in p.get("notices", []):
        row(f"{name}: notice", notice, "none", False)
    if name == "default":  # who held the device at its peak, adding up to the device layer; NVML's figure
        owners = memtrace_json("peak", "--by", "owner", traces)
        d = owners["processes"][0]["devices"][0] if owners and owners["processes"][0]["devices"] else {}
        whole = d.get("device_at_peak_bytes")
        total = d.get("owners_total_bytes")
        row("default: owners at the peak (" + ", ".join(f"{o['owner']} {mib(o['bytes'])}" for o in d.get("owners", []))
            + ")", mib(total), f"the device at the peak, {mib(whole)}, within 1%",
            whole is not None and total is not None and abs(total - whole) <= whole / 100)
        # NVML is read with the device layer's samples: its most beside their most, less other processes.
        nvml, mine = d.get("nvml_process_most_bytes"), d.get("device_most_sampled_less_others_bytes")
        row("default: this process at its most by NVML (nvidia-smi), beside cudaMemGetInfo's less other processes",
            mib(nvml), f"{mib(mine)}, within 1%",
            nvml is not None and mine is not None and abs(nvml - mine) <= mine / 100)
    if name == "cupti":  # every allocation call seen through CUPTI's callbacks
        p = report["processes"][0] if report else {}
        calls = sum(c["calls"] for api, c in events.items() if api.startswith("cu"))  # the CUDA calls
        row("cupti: calls seen through CUPTI", p.get("events_from_cupti"), calls, p.get("events_from_cupti") == calls)
        continue
    if bare:
        ratio = traced["step_ms"] / bare["step_ms"] if bare.get("step_ms") else float("nan")
        row(f"{name}: ms per step, with memtrace / without", f"{traced['step_ms']:.2f} / {bare['step_ms']:.2f}",
            "(simulated)" if simulated else "within 5%", simulated or ratio <= 1.05)

# whatif: the default run's tensor requests replayed through memtrace's model of PyTorch's allocator
# with expandable segments, beside the run that had them (PyTorch's own reserved_bytes.all.peak).
predicted = memtrace_json("whatif", "--alloc-conf", "expandable_segments:True", f"{work}/default")
expandable_run = account(f"{work}/expandable.out")
devices = predicted["processes"][0]["devices"] if predicted and predicted["processes"] else []
guess = devices[0]["predicted_reserved_peak_bytes"] if devices else None
real = expandable_run.get("max_memory_reserved") if expandable_run else None
row("whatif: the default run replayed with expandable_segments:True, beside that run (reserved peak)", mib(guess),
    f"{mib(real)}, within 1%", guess is not None and real is not None and abs(guess - real) <= real / 100)

# The cudaMallocAsync backend has no trace tracker (attaching throws): the program runs as without
# memtrace, and every tensor is its own cudaMallocAsync, the reserved layer's. What the pool reserves
# at its highest depends on time: a pool reuses a free already completed on the GPU even with no
# stream order between it and the allocation (cudaMemPoolReuseAllowOpportunistic, on by default,
# CUDA Runtime API, cudaMemPoolSetAttribute), and any CPU time added between calls changes which
# frees have completed. Measured on an H200 (PyTorch 2.11, 8 steps): 4093640704 in 3 runs of 3
# without memtrace, 4093640704 to 4194304000 with it; so that one is held to 5%, the rest exactly.
status = open(f"{work}/async.status").read().strip()
traced, bare = account(f"{work}/async.out"), account(f"{work}/async.bare")
timed_keys = ("pid", "step_ms", "max_memory_reserved")
same = traced is not None and bare is not None and all(traced[k] == bare[k] for k in traced if k not in timed_keys)
row("async: exit status and account, with memtrace and without", f"exit {status}, " + ("same" if same else "differ"),
    "exit 0, same", status == "0" and same)
if traced and bare and bare.get("max_memory_reserved"):
    ratio = traced["max_memory_reserved"] / bare["max_memory_reserved"]
    row("async: the pool's reserved high-water (max_memory_reserved), with / without", f"{ratio:.3f}x",
        "within 5% (time-dependent reuse)", abs(ratio - 1) <= 0.05)
report = memtrace_json("report", f"{work}/async")
p = report["processes"][0] if report else {}
row("async: allocated layer recorded by", attach_path(p), "none", attach_path(p) == "none")
# At the peak, by API: the pool's cudaMallocAsync calls apart from cuBLAS's own cudaMalloc.
by_api = memtrace_json("peak", "--by", "api", f"{work}/async")
sites = by_api["processes"][0]["devices"][0]["sites"] if by_api and by_api["processes"][0]["devices"] else []
r = next((s["bytes"] for s in sites if s["api"] == "cudaMallocAsync"), None)
row("async: cudaMallocAsync at the peak (allocated_bytes.all.peak: the pool's use)", r,
    traced and traced["max_memory_allocated"], traced is not None and r == traced["max_memory_allocated"])

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

verify = subprocess.run([memtrace, "verify", "--json", f"{work}/verify"], capture_output=True, text=True)
try:
    v = json.loads(verify.stdout)["processes"][0]
    row("verify: allocations recorded / in CUPTI's records", f"{v['recorded']} / {v['seen_by_cupti']}", "equal",
        v["agree"])
    for a in v["only_cupti"][:3] + v["only_recorded"][:3]:
        row("verify: seen by one side only", f"{mib(a['size'])} {a['api']}", a["location"] or a["kind"], False)
except (ValueError, KeyError, IndexError):
    row("verify: memtrace verify", f"exit {verify.returncode}", "exit 0", False)
    sys.stderr.write(open(f"{work}/verify.err").read()[-2000:])

for name in ("static_auto", "static_preload") if static else ():
    status = open(f"{work}/{name}.status").read().strip()
    own = account(f"{work}/{name}.out")
    report = memtrace_json("report", f"{work}/{name}")
    if status != "0" or own is None or report is None:
        row(f"{name}: the static-runtime program under memtrace", f"exit {status}", "exit 0", False)
        sys.stderr.write(open(f"{work}/{name}.err").read()[-2000:])
        continue
    p = report["processes"][0]
    recorded = sum(c["calls"] for api, c in p["events"].items() if is_allocation(api))
    made = sum(n for api, n in own["calls"].items() if is_allocation(api))
    row(f"{name}: allocation calls (its own count)", recorded, made, recorded == made)
    live = p["devices"][0]["live_at_exit_bytes"] if p["devices"] else 0
    row(f"{name}: live at exit", mib(live), mib(own["live_at_exit_bytes"].get("0")),
        live == own["live_at_exit_bytes"].get("0"))

# The training's CUDA calls, per API, whichever layer records them: the interposers (preload),
# CUPTI's callbacks (cupti), or both (auto).
tables = {}
for name in ("preload", "cupti", "auto"):
    report = memtrace_json("report", f"{work}/{name}")
    events = report["processes"][0]["events"] if report and report["processes"] else {}
    tables[name] = {api: (c["calls"], c["bytes"]) for api, c in events.items() if api.startswith("cu")}
row("backends: CUDA calls per API, preload / cupti / auto",
    " / ".join(str(sum(c for c, _ in t.values())) for t in tables.values()), "equal tables",
    bool(tables["preload"]) and tables["preload"] == tables["cupti"] == tables["auto"])
for api in sorted(set().union(*tables.values())):
    if len({repr(t.get(api)) for t in tables.values()}) > 1:
        row(f"backends: {api} (calls, bytes)", " / ".join(str(t.get(api)) for t in tables.values()), "equal", False)

# memtrace attach: joined, recorded, left; the job finished as it would have.
status, job_status = open(f"{work}/attach.status").read().strip(), open(f"{work}/attach.job.status").read().strip()
row("attach: memtrace attach and the job's exit", f"{status}, {job_status}", "0, 0", status == "0" and job_status == "0")
if status != "0":
    sys.stderr.write(open(f"{work}/attach.err").read()[-2000:])
report = memtrace_json("report", f"{work}/attach")
p = report["processes"][0] if report and report["processes"] else {}
start = p["devices"][0].get("at_recording_start", {}) if p.get("devices") else {}
row("attach: PyTorch's segments known at the attach", mib(start.get("known_bytes")), "> 0",
    (start.get("known_bytes") or 0) > 0)
tensors = p.get("events", {}).get("torch.alloc", {}).get("calls", 0)
row("attach: tensors recorded after the attach", tensors, "> 0", tensors > 0)
for notice in p.get("notices", []):
    if "memtrace attach joined" not in notice and "held" not in notice and "in progress" not in notice:
        row("attach: notice", notice, "none", False)


def accounts(path):
    return {a["pid"]: a for a in (json.loads(line[len("memtrace-sample: "):]) for line in open(path, errors="replace")
                                   if line.startswith("memtrace-sample: "))} if os.path.exists(path) else {}


for name in shared:
    status = open(f"{work}/{name}.status").read().strip()
    own = accounts(f"{work}/{name}.out")
    report = memtrace_json("report", f"{work}/{name}")
    if status != "0" or not own or report is None:
        row(f"{name}: the program under memtrace", f"exit {status}", "exit 0", False)
        sys.stderr.write(open(f"{work}/{name}.err").read()[-2000:])
        continue
    for p in report["processes"]:
        mine = own.get(p["pid"])
        if mine is None:
            row(f"{name}: process {p['pid']} printed its account", "no", "yes", False)
            continue
        recorded = {api: c["calls"] for api, c in p["events"].items() if api in mine["calls"]}
        row(f"{name} ({p['pid']}): calls recorded (its own count)", sum(recorded.values()), sum(mine["calls"].values()),
            recorded == mine["calls"] and p["unmatched_frees"] == 0)
        if name == "graph_memory" and p["devices"]:
            graphs = p["devices"][0].get("graph_reserved_at_peak_bytes", 0)
            row("graph_memory: reserved by graphs at the peak", mib(graphs), ">= 12.0 MiB", graphs >= 12 * 2**20)

width = max(len(r[0]) for r in rows)
print(f"{'check':{width}}  {'memtrace':>24}  {'PyTorch / expected':>24}  verdict")
for check, got, want, verdict in rows:
    print(f"{check:{width}}  {got:>24}  {want:>24}  {verdict}")
print(f"\n{len(rows) - len(failed)} of {len(rows)} checks hold" + (": " + ", ".join(failed) if failed else ""))
print(f"the traces are in {work}/ (one folder a run: memtrace report {work}/default, memtrace leaks {work}/leak)")
sys.exit(1 if failed else 0)
PY
