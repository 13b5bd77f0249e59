"""Checks a file as pytorch.org/memory_viz reads it.

  python3 memory_viz_check.py FILE.pickle|FILE.json   ->  "ok", or what is wrong (exit 1)

What the viewer (PyTorch's torch/utils/viz/MemoryViz.js) reads, as its source shows it:
- the pickle with an unpickler of its own that knows only these opcodes (anything else throws):
  PROTO 2-4, FRAME, STOP, MARK, the empty dict/list/tuple, DICT, LIST, TUPLE, TUPLE1-3, APPEND(S),
  SETITEM(S), BININT, BININT1, BININT2, LONG1, BINFLOAT, NONE, NEWTRUE, NEWFALSE,
  SHORT_BINUNICODE, BINUNICODE, MEMOIZE, BINPUT, LONG_BINPUT, BINGET, LONG_BINGET;
- `segments`: `device`, `address`, `total_size`, `stream`, optional `frames`, and `blocks` whose
  `size`s tile the segment in address order (it places each block right after the one before,
  ignoring their `address`), each with `state` (active_allocated, active_pending_free, or anything
  else for free), `requested_size` and `frames`;
- `device_traces[device]`: entries with `action`, `addr` (`device_free` for an oom), `size`,
  `stream`, optional `frames` (lists of {filename, line, name}) and `category`; when any entry has
  a category, one must be `unknown` (the viewer pushes it onto a misspelled list otherwise, and
  throws);
- walking each trace backwards from the final state (the Allocator State History): a
  free_requested needs its block (a free_completed after it, or the block pending at the end), a
  segment_alloc its segment, a segment_map a segment that holds its range, and every live block a
  segment around it.
"""
import io
import json
import pickle
import pickletools
import sys

VIEWER_OPCODES = {
    "PROTO", "FRAME", "STOP", "MARK", "EMPTY_DICT", "EMPTY_LIST", "EMPTY_TUPLE", "DICT", "LIST", "TUPLE",
    "TUPLE1", "TUPLE2", "TUPLE3", "APPEND", "APPENDS", "SETITEM", "SETITEMS", "BININT", "BININT1",
    "BININT2", "LONG1", "BINFLOAT", "NONE", "NEWTRUE", "NEWFALSE", "SHORT_BINUNICODE", "BINUNICODE",
    "MEMOIZE", "BINPUT", "LONG_BINPUT", "BINGET", "LONG_BINGET",
}
ACTIONS = {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "segment_map",
           "segment_unmap", "oom", "snapshot"}
BLOCK_STATES = {"active_allocated", "active_pending_free", "inactive"}


def fail(what):
    print(what)
    sys.exit(1)


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def check_frames(frames, where):
    if not isinstance(frames, list):
        fail(f"{where}: frames is not a list")
    for f in frames:
        if not isinstance(f, dict) or not isinstance(f.get("filename"), str) or not is_int(f.get("line")) \
                or not isinstance(f.get("name"), str):
            fail(f"{where}: a frame is not {{filename: str, line: int, name: str}}: {f!r}")


def check(snapshot):
    if not isinstance(snapshot, dict) or not isinstance(snapshot.get("segments"), list) \
            or not isinstance(snapshot.get("device_traces"), list):
        fail("not a dict with segments and device_traces lists")
    segments_by_device = {}
    for i, seg in enumerate(snapshot["segments"]):
        where = f"segment {i}"
        for key in ("device", "address", "total_size", "stream"):
            if not is_int(seg.get(key)):
                fail(f"{where}: {key} is not an int")
        check_frames(seg.get("frames", []), where)
        addr = seg["address"]
        for j, b in enumerate(seg.get("blocks", [])):
            if b.get("state") not in BLOCK_STATES:
                fail(f"{where} block {j}: state {b.get('state')!r}")
            if not is_int(b.get("size")) or not is_int(b.get("requested_size")) or \
                    (b["state"] != "inactive" and b["requested_size"] > b["size"]):
                fail(f"{where} block {j}: size and requested_size")
            if b.get("address", addr) != addr:
                fail(f"{where} block {j}: does not follow the block before it (at {addr}, not {b.get('address')})")
            check_frames(b.get("frames", []), f"{where} block {j}")
            addr += b["size"]
        if addr != seg["address"] + seg["total_size"]:
            fail(f"{where}: its blocks cover {addr - seg['address']} of its {seg['total_size']} bytes")
        segments_by_device.setdefault(seg["device"], []).append(seg)
    categories = set()
    for device, trace in enumerate(snapshot["device_traces"]):
        if not isinstance(trace, list):
            fail(f"device {device}: its trace is not a list")
        for k, e in enumerate(trace):
            where = f"device {device} entry {k}"
            if e.get("action") not in ACTIONS:
                fail(f"{where}: action {e.get('action')!r}")
            if not is_int(e.get("device_free" if e["action"] == "oom" else "addr")) or not is_int(e.get("size")):
                fail(f"{where}: addr (device_free) and size")
            if not is_int(e.get("stream")):
                fail(f"{where}: stream")
            check_frames(e.get("frames", []), where)
            if "category" in e:
                categories.add(e["category"])
        simulate_backwards(device, segments_by_device.get(device, []), trace)
    if categories and "unknown" not in categories:
        fail(f"categories {sorted(categories)} but none 'unknown': the viewer throws")


def simulate_backwards(device, segments, trace):
    segs = sorted([s["address"], s["total_size"]] for s in segments)
    blocks = {}
    for s in segments:
        addr = s["address"]
        for b in s.get("blocks", []):
            if b["state"] in ("active_allocated", "active_pending_free"):
                blocks[addr] = b["size"]
            addr += b["size"]

    def segment_holding(addr, size):
        for s in segs:
            if s[0] <= addr and addr + size <= s[0] + s[1]:
                return s
        return None

    def check_blocks(k):
        for addr, size in blocks.items():
            if segment_holding(addr, size) is None:
                fail(f"device {device}: before entry {k}, the block at {addr:#x} lies in no segment")

    check_blocks(len(trace))
    for k in range(len(trace) - 1, -1, -1):
        e = trace[k]
        a = e["action"]
        if a == "free_completed":
            blocks[e["addr"]] = e["size"]
        elif a == "free_requested":
            if e["addr"] not in blocks:
                fail(f"device {device} entry {k}: free_requested of a block the viewer does not have")
        elif a == "alloc":
            blocks.pop(e["addr"], None)
        elif a in ("segment_free", "segment_unmap"):
            segs.append([e["addr"], e["size"]])
            segs.sort()
            if a == "segment_unmap":  # merged with its neighbours, as the viewer does
                merged = []
                for s in segs:
                    if merged and merged[-1][0] + merged[-1][1] == s[0]:
                        merged[-1][1] += s[1]
                    else:
                        merged.append(s)
                segs[:] = merged
        elif a == "segment_alloc":
            match = [s for s in segs if s[0] == e["addr"]]
            if not match:
                fail(f"device {device} entry {k}: segment_alloc of a segment the viewer does not have")
            segs.remove(match[0])
        elif a == "segment_map":
            s = segment_holding(e["addr"], e["size"])
            if s is None:
                fail(f"device {device} entry {k}: segment_map of a range no segment holds")
            end, cut_end = s[0] + s[1], e["addr"] + e["size"]
            segs.remove(s)
            if s[0] < e["addr"]:
                segs.append([s[0], e["addr"] - s[0]])
            if cut_end < end:
                segs.append([cut_end, end - cut_end])
            segs.sort()
        if a in ("alloc", "free_completed", "segment_alloc", "segment_map") and k % 64 == 0:
            check_blocks(k)


def main():
    path = sys.argv[1]
    with open(path, "rb") as f:
        data = f.read()
    if path.endswith(".json"):
        snapshot = json.loads(data)
    else:
        for op, arg, pos in pickletools.genops(data):
            if op.name not in VIEWER_OPCODES:
                fail(f"byte {pos}: opcode {op.name}, which the viewer's unpickler does not know")
            if op.name == "PROTO" and not 2 <= arg <= 4:
                fail(f"protocol {arg}: the viewer reads 2 to 4")
        # Python's own unpickler (Lib/pickle.py), not the C one: it holds each frame to whole opcodes
        # ("pickle exhausted before end of frame"), as the pickler writes them.
        snapshot = pickle._Unpickler(io.BytesIO(data)).load()
    check(snapshot)
    print("ok")


main()
