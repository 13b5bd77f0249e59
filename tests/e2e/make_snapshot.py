"""Writes a PyTorch memory snapshot as torch.cuda.memory._dump_snapshot does (pickle.dump of
_snapshot()'s dict: segments with their blocks, device_traces, one list of entries a device), of
a caching allocator that ran for a while on several devices: segments reserved and released,
blocks allocated and freed in them, some live before the trace began (freed in it without being
allocated in it), the devices' entries interleaved in time. The shape follows
torch/csrc/cuda/memory_snapshot.cpp (2.3 and later: time_us, frames as dicts shared between
entries, as PyTorch shares a traceback's frames).

  python3 make_snapshot.py OUT.pickle [--devices N] [--entries N] [--seed S]
"""
import argparse
import pickle
import random

SEGMENT = 20 << 20
BLOCK = 2 << 20


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--entries", type=int, default=20000, help="entries per device, about")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    frames = [[{"filename": f"train_{i}.py", "line": 10 + j, "name": f"step_{i}_{j}"} for j in range(4)]
              for i in range(12)]

    class Device:
        def __init__(self, d):
            self.d = d
            self.base = 0x7F0000000000 + d * (1 << 40)
            self.segments = {}  # addr -> {slot -> (size, frames) or None}
            self.trace = []
            self.next_segment = self.base
            # Live before the trace: two segments, half their blocks handed out.
            for _ in range(2):
                seg = self.reserve()
                for slot in range(0, SEGMENT // BLOCK, 2):
                    seg[slot] = (BLOCK - rng.randrange(0, 4096, 512), rng.choice(frames))

        def reserve(self):
            addr = self.next_segment
            self.next_segment += SEGMENT
            self.segments[addr] = {slot: None for slot in range(SEGMENT // BLOCK)}
            return self.segments[addr]

        def entry(self, t, action, addr, size, stack=None):
            self.trace.append({"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t,
                               "frames": stack if stack is not None else rng.choice(frames)})

        def step(self, t):
            live = [(a, s) for a, seg in self.segments.items() for s, b in seg.items() if b]
            free = [(a, s) for a, seg in self.segments.items() for s, b in seg.items() if not b]
            r = rng.random()
            if r < 0.45 and free:
                a, s = rng.choice(free)
                size, stack = BLOCK - rng.randrange(0, 4096, 512), rng.choice(frames)
                self.segments[a][s] = (size, stack)
                self.entry(t, "alloc", a + s * BLOCK, size, stack)
            elif r < 0.9 and live:
                a, s = rng.choice(live)
                size = self.segments[a][s][0]
                self.segments[a][s] = None
                self.entry(t, "free_requested", a + s * BLOCK, size)
                self.entry(t, "free_completed", a + s * BLOCK, size)
            elif r < 0.95 or not free:
                self.reserve()
                self.entry(t, "segment_alloc", self.next_segment - SEGMENT, SEGMENT)
            else:
                empty = [a for a, seg in self.segments.items() if not any(seg.values())]
                if empty:
                    a = rng.choice(empty)
                    del self.segments[a]
                    self.entry(t, "segment_free", a, SEGMENT)

        def final_segments(self):
            out = []
            for a, seg in sorted(self.segments.items()):
                blocks = []
                for s in range(SEGMENT // BLOCK):
                    b = seg[s]
                    if b:
                        blocks.append({"address": a + s * BLOCK, "size": BLOCK, "requested_size": b[0],
                                       "state": "active_allocated", "frames": b[1]})
                    else:
                        blocks.append({"address": a + s * BLOCK, "size": BLOCK, "state": "inactive"})
                out.append({"device": self.d, "address": a, "total_size": SEGMENT, "allocated_size": 0,
                            "active_size": 0, "requested_size": 0, "stream": 0, "segment_type": "large",
                            "segment_pool_id": (0, 0), "is_expandable": False, "frames": [], "blocks": blocks})
            return out

    devices = [Device(d) for d in range(args.devices)]
    t = 1_700_000_000_000_000
    for _ in range(args.entries * args.devices * 2 // 3):
        t += rng.randrange(1, 50)
        rng.choice(devices).step(t)
    snapshot = {"segments": [s for d in devices for s in d.final_segments()],
                "device_traces": [d.trace for d in devices],
                "allocator_settings": {}}
    with open(args.out, "wb") as f:
        pickle.dump(snapshot, f, protocol=4)


main()
