#!/usr/bin/env bash
# Records the runs tests/golden/outputs.py reads, once, into INPUTS (a new folder): C++ samples and
# the stand-in PyTorch's training on the simulated device, and the real PyTorch snapshots.
#   tests/golden/record.sh BUILD_DIR INPUTS
set -euo pipefail
build=$(cd "$1" && pwd)
inputs=$2
here=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$inputs"
memtrace="$build/bin/memtrace"
"$memtrace" run --sim -o "$inputs/train_loop" -- "$build/samples/train_loop" --steps 4 >/dev/null 2>&1
"$memtrace" run --sim -o "$inputs/leak" -- "$build/samples/leak" >/dev/null 2>&1
"$memtrace" run --sim --sim-capacity 1GiB -o "$inputs/oom" -- "$build/samples/oom" >/dev/null 2>&1 || true
"$memtrace" run --sim --verify -o "$inputs/processes" -- "$build/samples/processes" >/dev/null 2>&1
PYTHONPATH="$build/lib/sim/torch/site-packages" "$memtrace" run --sim -o "$inputs/torch" -- \
  python3 "$here/samples/python/torch_train.py" --steps 4 --leak --width 256 >/dev/null 2>&1
PYTHONPATH="$build/lib/sim/torch/site-packages" PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True \
  "$memtrace" run --sim --sim-capacity 2GiB -o "$inputs/torch_expandable" -- \
  python3 "$here/samples/python/torch_train.py" --steps 3 --oom --width 256 >/dev/null 2>&1
for p in "$here"/tests/data/torch/*.pickle; do cp "$p" "$inputs/"; done
