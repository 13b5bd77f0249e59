"""Rewrites a memory snapshot as PyTorch's own _dump_snapshot writes one, for bench row 10.

memtrace's memory-viz export shares one frames list among the entries that have the same stack;
PyTorch gives every entry a list of its own (its frame dicts shared), pickles every dict and list
through the memo (pickle.dump, protocol 4), and, from 2.4 on, puts 'compile_context' and
'user_metadata' in every entry (as the H200's PyTorch 2.11 snapshots have them: 28 frames an
entry, C++ frames first), and a free_completed shares its free_requested's frames list (read back
through the memo). Reading those costs more than reading memtrace's own exports; the bench reads
both.

    python3 bench/as_torch_pickles.py IN OUT [--stacks N] [--depth D]
"""
import argparse
import pickle
import random


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("src")
    parser.add_argument("dst")
    parser.add_argument("--stacks", type=int, default=500, help="distinct stacks (default 500)")
    parser.add_argument("--depth", type=int, default=28, help="frames an entry (default 28)")
    args = parser.parse_args()
    with open(args.src, "rb") as f:
        snapshot = pickle.load(f)
    rng = random.Random(1)
    cpp = [{"name": f"c10::cuda::Allocator{i}::malloc()", "filename": "??", "line": 0} for i in range(12)]
    python = [{"name": f"forward_{i}", "filename": f"/src/model/layer{i % 40}.py", "line": 10 + i}
              for i in range(400)]
    stacks = []
    for _ in range(args.stacks):
        inner = cpp[:rng.randrange(6, 12)]
        stacks.append(inner + [rng.choice(python) for _ in range(max(1, args.depth - len(inner)))])
    for trace in snapshot["device_traces"]:
        requested = {}  # addr -> the frames of its free_requested
        for entry in trace:
            entry["compile_context"] = "N/A"
            entry["user_metadata"] = ""
            addr = entry.get("addr", 0)
            if entry["action"] == "free_completed" and addr in requested:
                # PyTorch records both halves of a free with one context: the pickle shares the list
                # (every free_completed of a 2.11 snapshot from the H200 reads its free_requested's back).
                entry["frames"] = requested.pop(addr)
                continue
            entry["frames"] = list(stacks[(addr >> 9) % len(stacks)])  # a list of its own
            if entry["action"] == "free_requested":
                requested[addr] = entry["frames"]
    for segment in snapshot["segments"]:
        for block in segment.get("blocks", []):
            block["frames"] = list(stacks[(block.get("address", 0) >> 9) % len(stacks)])
    with open(args.dst, "wb") as f:
        pickle.dump(snapshot, f, protocol=4)


if __name__ == "__main__":
    main()
