#!/usr/bin/env python3
"""The program's own profiler under cumemtrace (the CUPTI multiplexer,
tracer/sources/cupti/cupti_mux.h), in the two steps of gpu_suite.py:

  gpu_profiler.py run   --cumemtrace BIN --programs DIR --results DIR   (needs the GPU)
  gpu_profiler.py check --results DIR                                   (reads results only)

torch_profiled.py trains and opens torch.profiler(activities=[CUDA], profile_memory=True) for
a few steps in the middle. Checked, per profiled window:
  (a) the program's profiler output (kernel names and counts from key_averages(), its memory
      events) equals that of the same program run without cumemtrace;
  (b) cumemtrace's trace holds every allocation of the window: its peak of cuMemAllocAsync
      bytes inside the window equals the program's max_memory_allocated() around it, by the
      byte (async allocator: every tensor is its own cudaMallocAsync);
  (c) the profiler started and stopped twice in one run, once with record_shapes, and once
      while cumemtrace records kernels too (both want CONCURRENT_KERNEL records).
And Nsight-style injection: CUDA_INJECTION64_PATH already names another tool (other_tool.cc);
cumemtrace says once that it steps aside, the tool gets CUPTI, the program runs unchanged.
"""
import csv
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gpu_suite import Table, load, main_process, suite_main, tracer_lines  # noqa: E402

ASYNC = {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}
# name: (torch_profiled.py options, cumemtrace run options, extra environment, untraced twin)
CASES = {
    "two_windows": (["--windows", "2"], ["--allocator=async"], {}, "two_windows_untraced"),
    "record_shapes": (["--windows", "1", "--record-shapes"], ["--allocator=async"], {},
                      "record_shapes_untraced"),
    "with_kernel_records": (["--windows", "1"], ["--allocator=async"],
                            {"CUMEMTRACE_KERNELS": "1"}, "one_window_untraced"),
}
UNTRACED = {
    "two_windows_untraced": ["--windows", "2"],
    "record_shapes_untraced": ["--windows", "1", "--record-shapes"],
    "one_window_untraced": ["--windows", "1"],
}


def execute(argv, env, timeout=600):
    started = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, timeout=timeout, env=dict(os.environ, **env))
    return {"argv": argv, "status": proc.returncode,
            "seconds": round(time.monotonic() - started, 2),
            "stdout": proc.stdout.decode(errors="replace"),
            "stderr": proc.stderr.decode(errors="replace")}


def run(args):
    os.makedirs(args.results, exist_ok=True)
    program = [sys.executable, os.path.join(HERE, "torch_profiled.py")]
    out = lambda name: ["--out", os.path.join(args.results, name + ".profile.json")]
    records = {}
    for name, options in UNTRACED.items():
        records[name] = execute(program + out(name) + options, ASYNC)
        print(f"ran {name}: status {records[name]['status']}", flush=True)
    for name, (options, run_options, env, _) in CASES.items():
        folder = os.path.join(args.results, name)
        records[name] = execute([args.cumemtrace, "run", "-o", folder, *run_options, "--",
                                 *program, *out(name), *options], env)
        csv_dir = os.path.join(args.results, name + ".csv")
        export = execute([args.cumemtrace, "export", "--format", "csv", "--force", "-o", csv_dir,
                          folder], {})
        records[name]["export_status"] = export["status"]
        records[name]["export_stderr"] = export["stderr"]
        print(f"ran {name}: status {records[name]['status']}, export {export['status']}",
              flush=True)
    # Another tool owns CUDA_INJECTION64_PATH (Nsight-style), with and without cumemtrace.
    tool = os.path.join(args.programs, "libother_tool.so")
    tool_env = dict(ASYNC, CUDA_INJECTION64_PATH=tool)
    records["other_tool_untraced"] = execute(program + out("other_tool_untraced") +
                                             ["--windows", "0"], tool_env)
    records["other_tool"] = execute([args.cumemtrace, "run", "-o",
                                     os.path.join(args.results, "other_tool"), "--allocator=async",
                                     "--", *program, *out("other_tool"), "--windows", "0"],
                                    {"CUDA_INJECTION64_PATH": tool})
    print(f"ran other_tool: status {records['other_tool']['status']}", flush=True)
    with open(os.path.join(args.results, "runs.json"), "w") as f:
        json.dump(records, f, indent=1)


def window_peaks(csv_dir, marks):
    """Per window: the peak of live cuMemAllocAsync bytes between the two marker allocations,
    from lifetimes.csv (one row per allocation, birth and death times)."""
    rows = []
    with open(os.path.join(csv_dir, "lifetimes.csv"), newline="") as f:
        for row in csv.DictReader(f):
            if row["api"] != "cuMemAllocAsync":
                continue
            birth = int(row["birth_ns"])
            death = int(row["death_ns"]) if row["death_ns"] else None
            rows.append((birth, death, int(row["bytes"])))
    before = sorted(r for r in rows if r[2] == marks[0])
    after = sorted(r for r in rows if r[2] == marks[1])
    peaks = []
    for b, a in zip(before, after):
        start = b[1]  # the first marker is freed just before the window opens
        end = a[0]    # the second is made just after it closes
        if start is None:
            peaks.append(None)
            continue
        live = sum(n for birth, death, n in rows
                   if birth <= start and (death is None or death > start))
        events = []
        for birth, death, n in rows:
            if start < birth < end:
                events.append((birth, n))
            if death is not None and start < death < end:
                events.append((death, -n))
        peak = live
        for _, delta in sorted(events, key=lambda e: (e[0], e[1])):
            live += delta
            peak = max(peak, live)
        peaks.append(peak)
    return peaks


def check_case(t, runs, results, name, twin):
    r = runs[name]
    t.check(name, "exit status", 0, r["status"])
    t.check(name, "stdout unchanged", runs[twin]["stdout"], r["stdout"])
    t.check(name, "cumemtrace kept CUPTI (no hand-over notice)", [],
            [line for line in tracer_lines(r["stderr"]) if "CUPTI" in line])
    try:
        ours = load(os.path.join(results, name + ".profile.json"))
        theirs = load(os.path.join(results, twin + ".profile.json"))
    except OSError as e:
        t.check(name, "profile written", True, str(e), False)
        return
    t.check(name, "profiled windows", len(theirs["windows"]), len(ours["windows"]))
    t.check(name, "allocator backend", "cudaMallocAsync", ours["allocator_backend"])
    for k, (w, u) in enumerate(zip(ours["windows"], theirs["windows"])):
        # (a) the program's profiler sees exactly what it sees without cumemtrace.
        t.check(name, f"window {k}: profiler kernel kinds", len(u["kernels"]), len(w["kernels"]))
        t.check(name, f"window {k}: profiler kernel launches", sum(u["kernels"].values()),
                sum(w["kernels"].values()))
        t.check(name, f"window {k}: profiler kernels by name", True, w["kernels"] == u["kernels"],
                w["kernels"] == u["kernels"])
        for key in ("memory_events", "memory_allocated_bytes", "memory_freed_bytes"):
            t.check(name, f"window {k}: profiler {key}", u[key], w[key])
        t.check(name, f"window {k}: some kernels profiled", True, sum(w["kernels"].values()) > 0)
    # (b) cumemtrace saw every allocation of the window.
    t.check(name, "csv export", 0, r.get("export_status"))
    peaks = window_peaks(os.path.join(results, name + ".csv"), ours["marks"])
    t.check(name, "windows found in the trace", len(ours["windows"]), len(peaks))
    for k, (w, peak) in enumerate(zip(ours["windows"], peaks)):
        t.check(name, f"window {k}: trace peak = max_memory_allocated (bytes)",
                w["max_memory_allocated"], peak)
    summary = load(os.path.join(results, name, "summary.json"))
    process = main_process(summary, "torch_profiled.py")
    t.check(name, "records dropped by CUPTI or the tracer", 0,
            sum(d.get("count", 0) for d in process.get("dropped", [])))
    notices = [n.get("code", "") for n in process.get("notices", [])]
    t.check(name, "CUPTI notices in the trace", [], [n for n in notices if "cupti" in n])


def check_other_tool(t, runs):
    name = "other_tool"
    r = runs[name]
    u = runs["other_tool_untraced"]
    t.check(name, "exit status", 0, r["status"])
    t.check(name, "stdout unchanged", u["stdout"], r["stdout"])
    lines = [line for line in tracer_lines(r["stderr"]) if "trace written" not in line]
    t.check(name, "cumemtrace says once that it steps aside", 1,
            sum("another CUDA tool is injected" in line for line in lines))
    tool = [line for line in r["stderr"].splitlines() if line.startswith("other_tool:")]
    tool_untraced = [line for line in u["stderr"].splitlines() if line.startswith("other_tool:")]
    t.check(name, "the other tool got CUPTI (untraced)", True,
            bool(tool_untraced) and "subscribe status 0," in tool_untraced[0])
    t.check(name, "the other tool got CUPTI (under cumemtrace)", True,
            bool(tool) and "subscribe status 0," in tool[0])
    count = lambda lines_: int(lines_[0].split(",")[1].split()[0]) if lines_ else -1
    t.check(name, "the other tool saw the launches it sees alone", count(tool_untraced),
            count(tool))


def check(args):
    runs = load(os.path.join(args.results, "runs.json"))
    t = Table()
    for name, (_, _, _, twin) in CASES.items():
        check_case(t, runs, args.results, name, twin)
    check_other_tool(t, runs)
    return 1 if t.print() else 0


def main():
    return suite_main(__doc__, run, check)


if __name__ == "__main__":
    sys.exit(main())
