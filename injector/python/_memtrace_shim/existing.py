"""What PyTorch's caching allocator holds when memtrace attaches to a running process: its own
snapshot (torch.cuda.memory._snapshot: segments, and the blocks carved from them), told to the
injector as allocations older than the recording (memtrace_existing), so that the first report
already shows what is live, and the frees that come later find what they free.

Snapshot fields as PyTorch writes them (torch/csrc/cuda/memory_snapshot.cpp, 2.0 to 2.11): a
segment's "device", "address", "total_size", "stream", "is_expandable" (2.1+); a block's "size",
"state" ("active_allocated", "active_pending_free", "inactive"), and "address" and
"requested_size" from 2.1 (before: addresses follow from the sizes, in order from the segment's).
"""

# format/include/memtrace/format/api.h
CUDA_MALLOC, TORCH_ALLOC, TORCH_SEGMENT_ALLOC = 1, 38, 41


def publish(torch, existing):
    """Tells EXISTING(api, device, addr, size, stream) every segment and live block; (the count of
    blocks, the count of segments), or None when PyTorch has not started CUDA (nothing is held)
    or keeps no snapshot."""
    if torch is None or not torch.cuda.is_initialized():
        return None
    try:
        snapshot = torch.cuda.memory._snapshot()
    except Exception:
        return None  # the cudaMallocAsync backend and pluggable allocators keep none
    segments = snapshot.get("segments", []) if isinstance(snapshot, dict) else snapshot
    blocks = 0
    for segment in segments:
        device, address, stream = int(segment["device"]), int(segment["address"]), int(segment.get("stream", 0))
        if not segment.get("is_expandable", False):
            # Expandable segments are mapped pages of one reservation (cuMemCreate, cuMemMap), which
            # the snapshot does not list: their reserved layer stays unknown.
            existing(CUDA_MALLOC, device, address, int(segment["total_size"]), stream)
        existing(TORCH_SEGMENT_ALLOC, device, address, int(segment["total_size"]), stream)
        offset = address
        for block in segment.get("blocks", []):
            size = int(block["size"])
            block_address = int(block.get("address", offset))
            offset = block_address + size
            if block.get("state") in ("active_allocated", "active_pending_free"):
                existing(TORCH_ALLOC, device, block_address, int(block.get("requested_size") or size), stream)
                blocks += 1
    return blocks, len(segments)
