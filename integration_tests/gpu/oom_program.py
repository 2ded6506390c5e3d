#!/usr/bin/env python3
"""Runs out of GPU memory on purpose and writes what PyTorch itself saw just before.

  oom_program.py --mode fragment|too-large --stats FILE

fragment: a 1 GiB block is split into sixteen 64 MiB tensors and every other one is freed
(512 MiB free in eight 64 MiB holes of one segment, which empty_cache() cannot give back);
the device is then filled to about 64 MiB free, and a 160 MiB tensor is asked for: less than
the free total, more than any free block. With PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
the allocator unmaps the free pages and the request fits.
too-large: the same state, then a request of twice the device's memory.

Just before the request it writes torch.cuda.memory_snapshot()'s view: per (segment_type,
stream) the largest inactive block and the inactive bytes, their total, and the device's free
bytes; then whether the request raised torch.OutOfMemoryError (caught: the exit status is 0).
"""
import argparse
import json
import os

import torch

MiB = 1 << 20


def cache_view():
    """Largest inactive block and inactive bytes per "segment_type/stream", from PyTorch."""
    largest, free = {}, {}
    for segment in torch.cuda.memory_snapshot():
        key = f"{segment['segment_type']}/{segment['stream']}"
        for block in segment["blocks"]:
            if block["state"] == "inactive":
                largest[key] = max(largest.get(key, 0), block["size"])
                free[key] = free.get(key, 0) + block["size"]
    return largest, free


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=("fragment", "too-large"), required=True)
    parser.add_argument("--stats", required=True)
    args = parser.parse_args()
    device = torch.device("cuda", 0)
    torch.cuda.init()

    big = torch.empty(1024 * MiB, dtype=torch.uint8, device=device)
    del big  # its block stays cached, whole
    parts = [torch.empty(64 * MiB, dtype=torch.uint8, device=device) for _ in range(16)]
    kept = parts[0::2]
    del parts  # every other 64 MiB piece is free again, between two live ones
    torch.cuda.synchronize()
    # No empty_cache() here: nothing is wholly free, and with expandable segments it would
    # unmap the holes' pages before the fill takes the device's memory.

    free, total = torch.cuda.mem_get_info(device)
    # The fill leaves about 64 MiB free. Should the driver refuse that much at once, a smaller
    # fill is tried; gpu_oom.py then says so (the trace has that OOM first).
    filler, attempts = None, 0
    while filler is None and attempts < 8:
        attempts += 1
        fill = (free - (64 + 256 * (attempts - 1)) * MiB) // (2 * MiB) * (2 * MiB)
        try:
            filler = torch.empty(fill, dtype=torch.uint8, device=device)
        except torch.OutOfMemoryError:
            pass

    request = 160 * MiB if args.mode == "fragment" else 2 * total
    request = (request + 511) // 512 * 512  # as the allocator rounds it (512-byte blocks)
    largest, inactive = cache_view()
    device_free, _ = torch.cuda.mem_get_info(device)
    raised = False
    try:
        x = torch.empty(request, dtype=torch.uint8, device=device)
        del x
    except torch.OutOfMemoryError:
        raised = True
    stats = {"mode": args.mode, "request_bytes": request, "raised": raised,
             "largest_free_block": largest, "free_bytes": inactive,
             "free_total_bytes": sum(inactive.values()), "device_free_bytes": device_free,
             "device_total_bytes": total, "filler_bytes": fill, "filler_attempts": attempts,
             "kept": len(kept),
             "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")}
    del filler, kept
    with open(args.stats, "w") as f:
        json.dump(stats, f, indent=1)
    print(f"{args.mode}: request {request} B, raised {raised}; largest free blocks {largest}")


if __name__ == "__main__":
    main()
