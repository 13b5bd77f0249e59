"""The figures of a PyTorch memory snapshot, read with Python's own pickle and counted the way
PyTorch counts them, independently of memtrace: the tests hold memtrace's reading against it.

  python3 torch_reference.py SNAPSHOT.pickle   ->  JSON on stdout

Per device: the allocated layer (memory_stats()["requested_bytes.*"]: the bytes a tensor asked
for, from its `alloc` until its `free_completed`, as c10/cuda/CUDACachingAllocator.cpp counts
requested_bytes; a block live before the trace began by its `requested_size`, as MemoryViz.js
draws it) and the reserved layer (segments and mapped ranges), each at its peak and at the end, with
what was live before the trace began reconstructed from the final state by walking the trace
backwards, as PyTorch's MemoryViz.js does.
"""
import json
import pickle
import sys

LIVE_STATES = ("active_allocated", "active_pending_free", "active_awaiting_free")


def device_figures(segments, trace, device):
    blocks = {}  # addr -> requested size
    reserved = 0
    for seg in segments:
        if seg.get("device", 0) != device:
            continue
        reserved += seg["total_size"]
        addr = seg["address"]
        for b in seg.get("blocks", []):
            addr = b.get("address", addr)
            if b["state"] in LIVE_STATES:
                blocks[addr] = b.get("requested_size") or b["size"]
            addr += b["size"]
    final_reserved = reserved
    for e in reversed(trace):
        a = e["action"]
        if a == "alloc":
            blocks.pop(e["addr"], None)
        elif a == "free_completed":
            blocks[e["addr"]] = e["size"]
        elif a in ("segment_alloc", "segment_map"):
            reserved -= e["size"]
        elif a in ("segment_free", "segment_unmap"):
            reserved += e["size"]
    live = dict(blocks)
    allocated = sum(live.values())
    peaks = {"allocated": allocated, "reserved": reserved}
    ooms = 0
    for e in trace:
        a = e["action"]
        if a == "alloc":
            live[e["addr"]] = e["size"]
            allocated += e["size"]
        elif a == "free_completed":
            allocated -= live.pop(e["addr"], 0)
        elif a in ("segment_alloc", "segment_map"):
            reserved += e["size"]
        elif a in ("segment_free", "segment_unmap"):
            reserved -= e["size"]
        elif a == "oom":
            ooms += 1
        peaks["allocated"] = max(peaks["allocated"], allocated)
        peaks["reserved"] = max(peaks["reserved"], reserved)
    assert reserved == final_reserved, "the trace does not lead to the final state"
    return {
        "device": device,
        "allocated_peak": peaks["allocated"],
        "allocated_end": allocated,
        "allocated_end_count": len(live),
        "reserved_peak": peaks["reserved"],
        "reserved_end": reserved,
        "ooms": ooms,
        "events": len(trace),
    }


def main():
    with open(sys.argv[1], "rb") as f:
        snapshot = pickle.load(f)
    if isinstance(snapshot, list):
        segments, traces = snapshot, []
    else:
        segments, traces = snapshot["segments"], snapshot.get("device_traces", [])
    devices = sorted({s.get("device", 0) for s in segments} | {d for d, t in enumerate(traces) if t})
    out = [device_figures(segments, traces[d] if d < len(traces) else [], d) for d in devices]
    json.dump({"devices": out}, sys.stdout)


main()
