#!/usr/bin/env python3
"""Checks a memory_viz snapshot written by `cumemtrace export --format memory-viz` against the
summary of the same trace, reading it with Python's own pickle (as PyTorch's tools do).

  check_memory_viz.py SNAPSHOT.pickle SUMMARY.json [--at-oom]

- segments: each segment's blocks tile it exactly (contiguous, sizes add up);
- device_traces: replaying the actions never frees what is not allocated, never allocates an
  address twice, puts every block inside a live segment without overlapping another block,
  and ends with exactly the segments (and active blocks) of the snapshot;
- the highest sum of live `alloc`s is the summary's device peak (async mode, and native mode
  with the PyTorch bridge, where tensors are blocks and other memory one-block segments);
  without any `alloc` (native mode without the bridge) the highest sum of live segments is;
- categories are the summary's phase names or "unknown", and "unknown" is among them (the
  page itself adds it through a misspelled field and stops otherwise); times never go back
  and are wall-clock microseconds: from the process's first timestamp on.

With --at-oom (a snapshot of `export --at oom`), the trace ends at the first out-of-memory: the
replayed peak is at most the summary's, the device's trace ends with that `oom` entry, and
the largest inactive block of the OOM's pool is the post-mortem's largest free block.
"""
import json
import pickle
import sys


def fail(message):
    print("FAIL: " + message)
    sys.exit(1)


def main(snapshot_path, summary_path, at_oom=None):
    with open(snapshot_path, "rb") as f:
        snap = pickle.load(f)
    with open(summary_path) as f:
        summary = json.load(f)
    if set(snap) != {"segments", "device_traces"}:
        fail("top-level keys %s" % sorted(snap))
    for seg in snap["segments"]:
        at = seg["address"]
        for block in seg["blocks"]:
            if block["address"] != at:
                fail("blocks of segment %#x do not tile it" % seg["address"])
            at += block["size"]
        if at != seg["address"] + seg["total_size"]:
            fail("blocks of segment %#x do not add up to its size" % seg["address"])

    # The exported process: the one whose devices' peaks match (highest peak by default).
    process = max(summary["processes"],
                  key=lambda p: max([d["peak"]["bytes"] for d in p["devices"]] or [0]))
    if at_oom:
        process = next(p for p in summary["processes"] if p["failed_allocations"])
    # Each entry's category: PyTorch's name of its category where the process has categories
    # (collector/engine/lifetimes.cc), else the phase it was allocated in.
    if (process.get("categories") or {}).get("given"):
        phases = {"parameter", "optimizer_state", "input", "temporary", "activation", "gradient",
                  "autograd_detail", "unknown"}
    else:
        phases = {p["name"] for p in process["phases"]} | {"unknown"}
    peaks = {d["index"]: d["peak"]["bytes"] for d in process["devices"]}

    origin_us = process["first_timestamp_abs_ns"] // 1000
    if origin_us < 1577836800 * 10**6:  # 2020-01-01: the golden traces are all later
        fail("the process's origin %d us is not on the wall clock" % origin_us)
    categories = {e["category"] for t in snap["device_traces"] for e in t if "category" in e}
    if categories and "unknown" not in categories:
        fail("categories %s without 'unknown': MemoryViz.js stops on it" % sorted(categories))
    for device, trace in enumerate(snap["device_traces"]):
        segments, blocks = {}, {}
        blocks_known = any(e["action"] == "alloc" for e in trace)
        live = peak = 0
        last_time = 0
        for entry in trace:
            action, addr, size = entry["action"], entry["addr"], entry["size"]
            # PyTorch's _memory_viz.trace() reads an OOM's free bytes under device_free.
            if action == "oom" and entry.get("device_free") != addr:
                fail("oom entry without device_free = addr: %r" % entry)
            if entry["category"] not in phases:
                fail("category %r is not a phase" % entry["category"])
            if entry["time_us"] < last_time:
                fail("time goes back on device %d" % device)
            last_time = entry["time_us"]
            if last_time < origin_us:
                fail("time_us %d before the process started (%d): not wall-clock" %
                     (last_time, origin_us))
            if action == "segment_alloc":
                if addr in segments:
                    fail("segment %#x allocated twice" % addr)
                segments[addr] = size
                if not blocks_known:
                    live += size
            elif action == "segment_free":
                if segments.pop(addr, None) != size:
                    fail("segment_free of %#x that is not allocated with that size" % addr)
                if any(addr <= b < addr + size for b in blocks):
                    fail("segment_free of %#x with blocks still allocated in it" % addr)
                if not blocks_known:
                    live -= size
            elif action == "alloc":
                if addr in blocks or not any(s <= addr and addr + size <= s + n
                                             for s, n in segments.items()):
                    fail("alloc of %#x (%d bytes) outside a live segment" % (addr, size))
                if any(b < addr + size and addr < b + n for b, n in blocks.items()):
                    fail("alloc of %#x (%d bytes) overlaps a live block" % (addr, size))
                blocks[addr] = size
                live += size
            elif action == "free_requested":
                if blocks.get(addr) != size:
                    fail("free_requested of %#x that is not allocated" % addr)
            elif action == "free_completed":
                if blocks.pop(addr, None) != size:
                    fail("free_completed of %#x that is not allocated" % addr)
                live -= size
            elif action not in ("oom", "snapshot"):
                fail("unknown action %r" % action)
            peak = max(peak, live)
        if at_oom:
            if peak > peaks.get(device, 0):
                fail("device %d: replayed peak %d above the summary's" % (device, peak))
            actions = [e["action"] for e in trace if e["action"] != "snapshot"]
            if actions and actions[-1] != "oom":
                fail("device %d: the trace does not end at the oom" % device)
        elif device in peaks and peak != peaks[device]:
            fail("device %d: replayed peak %d, summary says %d" % (device, peak, peaks[device]))
        at_end = {s["address"]: s["total_size"] for s in snap["segments"] if s["device"] == device}
        if at_end != segments:
            fail("device %d: segments at the end of the trace differ from the snapshot's" % device)
        active = {b["address"]: b["size"] for s in snap["segments"] if s["device"] == device
                  for b in s["blocks"] if b["state"] == "active_allocated"}
        if active != blocks:
            fail("device %d: live blocks differ from the snapshot's active blocks" % device)
    if at_oom:
        failures = process["failed_allocations"]
        oom = next((f for f in failures if f["kind"] == "TORCH_ALLOCATED"), failures[0])
        pm = oom["post_mortem"]
        if pm["pool"] is not None:
            largest = max([b["size"] for s in snap["segments"] if s["device"] == oom["device"]
                           and s["segment_type"] == pm["pool"] for b in s["blocks"]
                           if b["state"] == "inactive"] or [0])
            if largest != pm["largest_free_block_bytes"]:
                fail("largest inactive block %d, the post-mortem says %d" %
                     (largest, pm["largest_free_block_bytes"]))
    print("ok: %d segments, %d trace entries" %
          (len(snap["segments"]), sum(len(t) for t in snap["device_traces"])))


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--at-oom"]
    main(*args, at_oom="--at-oom" in sys.argv[1:])
