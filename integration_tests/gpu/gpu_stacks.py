#!/usr/bin/env python3
"""Stacks of allocations on the GPU (`run --stacks`, docs/design.md "Stacks"), in two steps:

  gpu_stacks.py run   --cumemtrace BIN --programs DIR --results DIR   (needs the GPU)
  gpu_stacks.py check --results DIR                                   (reads results only)

stacks_program.py (one training step of a small model whose forward makes one 128 MiB
activation, at a line the program finds in its own source) runs under `cumemtrace run
--stacks=python` and under `--stacks=all`. `check` asks: the largest activation live at the
device's peak in report.html's data (lifetime class "activation") has a stack whose innermost
frame of the program's own code is that line of Model.forward; summary.json's first
top_stacks row names the same line; the memory_viz export's block of that activation carries
that frame; with `all`, the stack has native frames too. Prints a pass/fail table.
"""
import base64
import json
import os
import pickle
import re
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gpu_suite import Table, device0, export_memory_viz, load, main_process, suite_main  # noqa: E402

PROGRAM = os.path.join(HERE, "stacks_program.py")
CASES = {"python": ["--stacks=python"], "all": ["--stacks=all"], "off": []}


def run(args):
    os.makedirs(args.results, exist_ok=True)
    records = {}
    for case, options in CASES.items():
        out = os.path.join(args.results, case)
        stats = os.path.join(args.results, case + ".stats.json")
        command = [args.cumemtrace, "run", "-o", out, *options, "--",
                   sys.executable, PROGRAM, "--stats", stats]
        started = time.monotonic()
        proc = subprocess.run(command, capture_output=True, timeout=600)
        records[case] = {"argv": command, "status": proc.returncode,
                         "seconds": round(time.monotonic() - started, 2),
                         "stderr": proc.stderr.decode(errors="replace")}
        export_memory_viz(args.cumemtrace, out, records[case])
        print(f"ran {case}: status {proc.returncode} in {records[case]['seconds']} s", flush=True)
        with open(os.path.join(args.results, case + ".log"), "w") as f:
            f.write(f"$ {' '.join(command)}\nstatus {proc.returncode}\n--- stderr\n"
                    f"{records[case]['stderr']}")
    with open(os.path.join(args.results, "stacks_runs.json"), "w") as f:
        json.dump(records, f, indent=1)


def page_data(path):
    with open(path, encoding="utf-8") as f:
        html = f.read()
    m = re.search(r'<script id="cumemtrace-data" type="application/json">(.*?)</script>', html,
                  re.S)
    return json.loads(m.group(1))


def column(b64, fmt):
    raw = base64.b64decode(b64)
    size = struct.calcsize(fmt)
    return [v[0] for v in struct.iter_unpack("<" + fmt, raw[: len(raw) // size * size])]


def user_frame(stacks, index, program_file):
    """The innermost frame in the program's own file, as (file, line, function)."""
    frames = stacks["frames"]
    for f in stacks["stacks"][index]:
        if frames["kind"][f] == "python" and os.path.basename(frames["file"][f]) == \
                os.path.basename(program_file):
            return frames["file"][f], frames["line"][f], frames["function"][f]
    return None


def check_case(t, runs, results, case):
    record = runs.get(case, {})
    t.check(case, "exit status", 0, record.get("status"))
    stats_path = os.path.join(results, case + ".stats.json")
    if not os.path.exists(stats_path):
        t.check(case, "program statistics", "written", "missing", False)
        return
    stats = load(stats_path)
    want = (os.path.basename(stats["file"]), stats["line"], stats["function"])

    # The page's data: the largest activation live at the peak and its stack.
    data = page_data(os.path.join(results, case, "report.html"))
    process = next((p for p in data["processes"]
                    if any(a.endswith("stacks_program.py") for a in p["command_line"][:3])),
                   next((p for p in data["processes"] if "stacks" in p), data["processes"][0]))
    t.check(case, "page data has a stack table", True, "stacks" in process)
    if "stacks" not in process:
        return
    device = next(d for d in process["devices"] if d["index"] == 0)
    a = device["allocations"]
    birth, death = column(a["birth_step"], "I"), column(a["death_step"], "I")
    size, stack = column(a["bytes"], "d"), column(a["stack"], "i")
    classes = process["lifetime_classes"]
    lifetime = column(a["lifetime_class"], "B") if "lifetime_class" in a else [255] * len(size)
    peak = device["peak_step"]
    live = [i for i in range(len(size)) if birth[i] <= peak < death[i]]
    activations = [i for i in live if lifetime[i] < len(classes) and
                   classes[lifetime[i]] == "activation"]
    t.check(case, "activations live at the peak", "> 0", len(activations), len(activations) > 0)
    # Independent of the lifetime classes: the largest allocation with a stack at the peak.
    with_stack = [i for i in live if stack[i] >= 0]
    if with_stack:
        biggest = max(with_stack, key=lambda i: size[i])
        frame = user_frame(process["stacks"], stack[biggest], stats["file"])
        t.check(case, "largest allocation with a stack at the peak: its user frame", want,
                (os.path.basename(frame[0]), frame[1], frame[2]) if frame else None)
    else:
        t.check(case, "allocations with a stack at the peak", "> 0", 0, False)
    if activations:
        largest = max(activations, key=lambda i: size[i])
        t.check(case, "largest activation at the peak, bytes", stats["wide_bytes"],
                int(size[largest]), int(size[largest]) >= stats["wide_bytes"])
        frame = user_frame(process["stacks"], stack[largest], stats["file"]) \
            if stack[largest] >= 0 else None
        observed = (os.path.basename(frame[0]), frame[1], frame[2]) if frame else None
        t.check(case, "its innermost user frame", want, observed)
        if case == "all" and stack[largest] >= 0:
            kinds = {process["stacks"]["frames"]["kind"][f]
                     for f in process["stacks"]["stacks"][stack[largest]]}
            t.check(case, "with native frames too", True, "native" in kinds)

    # summary.json: the stack that held the most at the peak is that line.
    summary = load(os.path.join(results, case, "summary.json"))
    top = (device0(main_process(summary, "stacks_program.py")) or {}).get("peak", {}).get(
        "top_stacks", [])
    if not top:  # the program's process not recognised by its command line: any with stacks
        top = next((d["peak"]["top_stacks"] for p in summary["processes"] for d in p["devices"]
                    if d["peak"].get("top_stacks")), [])
    t.check(case, "summary top_stacks[0].frame",
            f"{want[0]}:{want[1]} in {want[2]}",
            top[0]["frame"] if top else None,
            bool(top) and top[0]["frame"].endswith(f"{want[0]}:{want[1]} in {want[2]}"))

    # memory_viz: a block of the activation's size has the frame (PyTorch's own format).
    viz_path = os.path.join(results, case, "memory_viz.pickle")
    if os.path.exists(viz_path):
        with open(viz_path, "rb") as f:
            viz = pickle.load(f)
        found = False
        for segment in viz["segments"]:
            for block in segment["blocks"]:
                for fr in block.get("frames", []):
                    if os.path.basename(fr["filename"]) == want[0] and fr["line"] == want[1] \
                            and fr["name"] == want[2]:
                        found = True
        traces = [e for trace in viz["device_traces"] for e in trace
                  if e["action"] in ("alloc", "segment_alloc") and
                  e["size"] >= stats["wide_bytes"]]
        in_trace = any(os.path.basename(fr["filename"]) == want[0] and fr["line"] == want[1]
                       for e in traces for fr in e["frames"])
        t.check(case, "memory_viz alloc entry has the frame", True, in_trace)
        # Blocks: what is still allocated at the end (the weights, made by the program's main).
        t.check(case, "memory_viz blocks carry the program's frames", True,
                found or any(os.path.basename(fr["filename"]) == want[0]
                             for s in viz["segments"] for b in s["blocks"]
                             for fr in b.get("frames", [])))


def check(args):
    runs = load(os.path.join(args.results, "stacks_runs.json"))
    t = Table()
    for case in ("python", "all"):
        check_case(t, runs, args.results, case)
    # Without --stacks: no stack table at all.
    off = page_data(os.path.join(args.results, "off", "report.html"))
    t.check("off", "no stack table without --stacks", False,
            any("stacks" in p for p in off["processes"]))
    timing = {case: load(os.path.join(args.results, case + ".stats.json"))["seconds"]
              for case in CASES if os.path.exists(os.path.join(args.results, case + ".stats.json"))}
    print("training seconds by case (orientation only; benchmarks/gpu/overhead.py measures):",
          timing)
    failed = t.print()
    t.save(os.path.join(args.results, "stacks_suite.json"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(suite_main(__doc__, run, check))
