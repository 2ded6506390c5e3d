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
that frame; with `all`, the stack has native frames too.

With `--stacks=all` also on the GPT-2-like training step (gpt_train.py) and the LibTorch
program (libtorch_train), as on stacks_program.py, `check` asks of every output (the page's
stack table, which the flame graph and the stack panel draw, the memory_viz export's frames,
summary.json's top stacks): no frame of cumemtrace (its libraries, the PyTorch bridge, its
Python hooks, its functions), of CUPTI, or of PyTorch's allocator in a tensor's stack; at
least 90% of the distinct native frames in libtorch*/libc10* named by function (frames with a
source line are named and counted apart); no frame of the interpreter in a stack that has
Python frames (merged: the Python frames stand in its eval loops' place); C++ names
demangled; and, for the LibTorch program, its own functions and LibTorch's named.
Prints a pass/fail table.
"""
import base64
import json
import os
import pickle
import re
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gpu_suite import (Table, device0, export_memory_viz, load, main_process,  # noqa: E402
                       run_case, suite_main)

PROGRAM = os.path.join(HERE, "stacks_program.py")
CASES = {"python": ["--stacks=python"], "all": ["--stacks=all"], "off": []}
# Other programs under --stacks=all: case -> the program's command (given the programs folder).
PROGRAMS_ALL = {
    "gpt_all": lambda programs: [sys.executable, os.path.join(HERE, "gpt_train.py"),
                                 "--steps", "2"],
    "libtorch_all": lambda programs: [os.path.join(programs, "libtorch_train"), "--steps", "3"],
}
# What the interpreter's own native frames are called (the eval loop and the calls around it).
INTERPRETER_FUNCTIONS = ("_PyEval_EvalFrameDefault", "_PyEval_Vector", "PyEval_EvalCode",
                         "_PyObject_MakeTpCall", "_PyFunction_Vectorcall", "PyObject_Call",
                         "_PyObject_Call", "Py_RunMain", "Py_BytesMain", "pymain_run_python")


def run(args):
    os.makedirs(args.results, exist_ok=True)
    records = {}
    for case, options in CASES.items():
        out = os.path.join(args.results, case)
        stats = os.path.join(args.results, case + ".stats.json")
        command = [args.cumemtrace, "run", "-o", out, *options, "--",
                   sys.executable, PROGRAM, "--stats", stats]
        records[case] = run_case(command, args.results, case)
        export_memory_viz(args.cumemtrace, out, records[case])
    for case, program in PROGRAMS_ALL.items():
        out = os.path.join(args.results, case)
        command = [args.cumemtrace, "run", "-o", out, "--stacks=all", "--",
                   *program(args.programs)]
        records[case] = run_case(command, args.results, case)
        export_memory_viz(args.cumemtrace, out, records[case])
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


def is_observer_frame(function, file):
    """A frame of cumemtrace (its libraries, the bridge, its Python hooks) or of CUPTI. With
    debug information a frame's file is its source file, not its module: cumemtrace's own
    functions are in namespace cumemtrace, and its sources under tracer/."""
    base = os.path.basename(file)
    return (base.startswith(("libcumemtrace", "libcupti")) or "cumemtrace::" in function
            or "/share/cumemtrace/python/" in file or "/tracer/sources/" in file
            or "/tracer/recording/" in file or "/tracer/sending/" in file)


def is_allocator_frame(function):
    """PyTorch's caching allocator's own functions, which a tensor's stack must start after.
    A segment's stack (the driver call the allocator makes) has them further out, under the
    driver's and the runtime's frames: only a stack that starts with one is wrong."""
    return "CUDACachingAllocator::" in function


def is_interpreter_frame(function, file):
    base = os.path.basename(file)
    return (function.startswith(INTERPRETER_FUNCTIONS) or base.startswith("libpython")
            or re.fullmatch(r"python[0-9.]*", base) is not None)


def check_frames_shown(t, runs, results, case, argv_suffix, program_module=None):
    """No output shows the tracer's, CUPTI's or the allocator's frames; libtorch's frames are
    named; a stack with Python frames has none of the interpreter's native frames."""
    record = runs.get(case, {})
    t.check(case, "exit status", 0, record.get("status"))
    page = os.path.join(results, case, "report.html")
    if not os.path.exists(page):
        t.check(case, "report.html", "written", "missing", False)
        return
    data = page_data(page)
    process = next((p for p in data["processes"] if "stacks" in p and
                    any(a.endswith(argv_suffix) for a in p["command_line"][:3])),
                   next((p for p in data["processes"] if "stacks" in p), None))
    t.check(case, "page data has a stack table", True, process is not None)
    if process is None:
        return
    frames, stacks = process["stacks"]["frames"], process["stacks"]["stacks"]
    names = list(zip(frames["function"], frames["file"], frames["kind"]))
    observers = sorted({f"{fn} ({os.path.basename(fl)})" for fn, fl, _ in names
                        if is_observer_frame(fn, fl)})
    t.check(case, "frames of cumemtrace, its bridge or CUPTI in the page's table", [],
            observers[:5])
    allocator = sorted({frames["function"][s[0]] for s in stacks if s and
                        is_allocator_frame(frames["function"][s[0]])})
    t.check(case, "stacks that start in PyTorch's allocator", [], allocator[:5])
    # Modules libtorch*.so*, libc10*.so* (not the LibTorch program, libtorch_train).
    torch_frames = [(fn, fl) for fn, fl, kind in names if kind == "native" and
                    re.match(r"lib(torch|c10)[\w-]*\.so", os.path.basename(fl))]
    named = [fn for fn, _ in torch_frames if not fn.startswith("0x")]
    share = len(named) / len(torch_frames) if torch_frames else 0.0
    t.check(case, "libtorch/libc10 native frames named (distinct frames)", ">= 90%",
            f"{len(named)}/{len(torch_frames)} = {share:.1%}",
            bool(torch_frames) and share >= 0.9)
    mangled = sorted({fn for fn, _, kind in names if kind == "native" and fn.startswith("_Z")})
    t.check(case, "C++ names demangled (no _Z... name)", [], mangled[:3])
    merged = [s for s in stacks if any(frames["kind"][f] == "python" for f in s)]
    interpreter = sorted({frames["function"][f] for s in merged for f in s
                          if frames["kind"][f] == "native" and
                          is_interpreter_frame(frames["function"][f], frames["file"][f])})
    if case != "libtorch_all":
        t.check(case, "stacks with Python frames", "> 0", len(merged), len(merged) > 0)
        t.check(case, "interpreter frames in stacks with Python frames", [], interpreter[:5])
        # Merged: in some stack, a native frame (PyTorch's) comes before a Python frame.
        interleaved = any(frames["kind"][s[0]] == "native" and
                          any(frames["kind"][f] == "python" for f in s) for s in merged)
        t.check(case, "a merged stack starts native and holds Python frames", True, interleaved)
    if program_module is not None:
        own = sorted({fn for fn, fl, kind in names if kind == "native" and
                      os.path.basename(fl) == program_module and not fn.startswith("0x")})
        t.check(case, f"the program's own functions named ({program_module})", "main among them",
                own[:5], "main" in own)
        libtorch = sorted({fn for fn, fl in torch_frames if "torch::" in fn or "at::" in fn})
        t.check(case, "LibTorch's functions named (torch::, at::)", "> 0", len(libtorch),
                len(libtorch) > 0)
    # memory_viz: no such frame either.
    viz_path = os.path.join(results, case, "memory_viz.pickle")
    if os.path.exists(viz_path):
        with open(viz_path, "rb") as f:
            viz = pickle.load(f)
        lists = [block.get("frames", []) for segment in viz["segments"]
                 for block in segment["blocks"]]
        lists += [e.get("frames", []) for trace in viz["device_traces"] for e in trace]
        bad = sorted({f"{fr['name']} ({os.path.basename(fr['filename'])})" for frs in lists
                      for fr in frs if is_observer_frame(fr["name"], fr["filename"])})
        t.check(case, "memory_viz frames of cumemtrace or CUPTI", [], bad[:5])
        starts = sorted({frs[0]["name"] for frs in lists if frs and
                         is_allocator_frame(frs[0]["name"])})
        t.check(case, "memory_viz frames that start in PyTorch's allocator", [], starts[:5])
    else:
        t.check(case, "memory_viz export", "written", "missing", False)
    # summary.json: the top stacks' frames are the program's side.
    summary = load(os.path.join(results, case, "summary.json"))
    tops = [row["frame"] for p in summary["processes"] for d in p["devices"]
            for row in d["peak"].get("top_stacks", [])]
    t.check(case, "summary top stacks", "> 0", len(tops), len(tops) > 0)
    bad_tops = [row for row in tops if "libcumemtrace" in row or "libcupti" in row or
                "cumemtrace::" in row]
    t.check(case, "summary top stacks naming cumemtrace or CUPTI", [], bad_tops[:3])


def check(args):
    runs = load(os.path.join(args.results, "stacks_runs.json"))
    t = Table()
    for case in ("python", "all"):
        check_case(t, runs, args.results, case)
    check_frames_shown(t, runs, args.results, "all", "stacks_program.py")
    check_frames_shown(t, runs, args.results, "gpt_all", "gpt_train.py")
    check_frames_shown(t, runs, args.results, "libtorch_all", "libtorch_train",
                       program_module="libtorch_train")
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
