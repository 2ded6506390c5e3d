"""What an attached trace tracker costs PyTorch itself, per tensor, inside one process.

The caching allocator builds a TraceEntry for each event only once some tracker is attached,
and it has no call to detach one, so no on/off window can switch that cost. This times a
loop of small tensors (torch.empty + del: torch hands over an ALLOC, a FREE_REQUESTED and a
FREE_COMPLETED; small pool) in blocks before and after attaching tracker_cost_probe.cc in
MODE, in the same process, pinned to one CPU, so both halves run at the same CPU speed as
far as the machine allows. `--mode none` attaches nothing: the drift between the
halves, i.e. the noise.

    python3 attach_cost.py --probe libtracker_cost_probe.so --mode noop [--cpu N] [--blocks 200]

Prints one JSON line: us per pair before and after (lowest decile and median of the
blocks) and their differences in ns. The machine's CPU changes speed within seconds, so
the halves are compared by their lowest decile: many short blocks each catch the fast speed.
"""
import argparse
import ctypes
import json
import os
import statistics
import time

import torch


def time_blocks(blocks, pairs):
    times = []
    for _ in range(blocks):
        start = time.perf_counter()
        for _ in range(pairs):
            t = torch.empty(4096, device="cuda")
            del t
        times.append((time.perf_counter() - start) / pairs * 1e6)
    return times


def decile(times):
    return sorted(times)[len(times) // 10]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--probe", required=True, help="libtracker_cost_probe.so")
    parser.add_argument("--mode", default="noop", help="the probe's mode, or none")
    parser.add_argument("--cpu", type=int, default=None,
                        help="the one CPU to run on (default: the highest this process may use)")
    parser.add_argument("--blocks", type=int, default=200, help="timed blocks per half")
    parser.add_argument("--pairs", type=int, default=1000, help="alloc+free pairs per block")
    args = parser.parse_args()
    os.sched_setaffinity(0, {max(os.sched_getaffinity(0)) if args.cpu is None else args.cpu})
    torch.empty(1, device="cuda")  # the caching allocator exists from here
    time_blocks(3, args.pairs)  # warm-up
    before = time_blocks(args.blocks, args.pairs)
    if args.mode != "none":
        probe = ctypes.CDLL(args.probe)
        if probe.cumemtrace_tracker_probe_attach(args.mode.encode()) != 0:
            raise SystemExit(f"tracker probe: cannot attach in mode {args.mode}")
    time_blocks(3, args.pairs)
    after = time_blocks(args.blocks, args.pairs)
    print(json.dumps({
        "mode": args.mode,
        "before_us": round(decile(before), 4), "after_us": round(decile(after), 4),
        "before_median_us": round(statistics.median(before), 4),
        "after_median_us": round(statistics.median(after), 4),
        "added_ns": round((decile(after) - decile(before)) * 1000, 1),
        "added_median_ns": round((statistics.median(after) - statistics.median(before)) * 1000,
                                 1),
    }))


if __name__ == "__main__":
    main()
