#!/usr/bin/env python3
"""The GPU suite of cumemtrace, in two steps so results can be re-checked anywhere:

  gpu_suite.py run   --cumemtrace BIN --programs DIR --results DIR   (needs the GPU)
  gpu_suite.py check --results DIR                                   (reads results only)

`run` executes every case under `cumemtrace run` (plus untraced twins) and records exit
statuses, stdout and stderr; `check` compares cumemtrace's summary.json with what each
program reports about itself and prints a pass/fail table (exit status 1 on any failure).
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MiB = 1 << 20


def cases(cumemtrace, programs, results):
    torch_py = [sys.executable, os.path.join(HERE, "torch_train.py")]
    cuda = os.path.join(programs, "cuda_phases")
    libtorch = os.path.join(programs, "libtorch_train")

    def traced(name, command, *options, env=None):
        return {"name": name, "traced": True, "env": env or {},
                "argv": [cumemtrace, "run", "-o", os.path.join(results, name), *options,
                         "--", *command]}

    def plain(name, command):
        return {"name": name, "traced": False, "argv": command}

    stats = lambda name: ["--stats", os.path.join(results, name + ".stats.json")]
    return [
        traced("cuda_phases", [cuda, os.path.join(results, "cuda_phases.expected.json"), "4"]),
        plain("cuda_phases_untraced", [cuda, os.path.join(results, "untraced.expected.json"), "4"]),
        # The same programs with memory from CUPTI's own MEMORY2 records instead of the driver
        # callbacks: one source checks the other.
        traced("cuda_phases_cupti",
               [cuda, os.path.join(results, "cuda_phases_cupti.expected.json"), "4"],
               env={"CUMEMTRACE_MEMORY_RECORDS": "cupti"}),
        traced("torch_async_cupti", torch_py + stats("torch_async_cupti"), "--allocator=async",
               env={"CUMEMTRACE_MEMORY_RECORDS": "cupti"}),
        traced("torch_async", torch_py + stats("torch_async"), "--allocator=async"),
        traced("torch_native", torch_py + stats("torch_native"), "--allocator=native"),
        traced("libtorch_async", [libtorch] + stats("libtorch_async"), "--allocator=async"),
        traced("libtorch_native", [libtorch] + stats("libtorch_native"), "--allocator=native"),
        traced("torch_exit3", torch_py + ["--steps", "1", "--exit-code", "3"]),
        traced("torch_sigterm", torch_py + ["--steps", "1", "--kill-self", "SIGTERM"]),
        traced("torch_quiet", torch_py + ["--steps", "2"], "--quiet"),
        plain("torch_untraced", torch_py + ["--steps", "2"]),
        # Another CUPTI client in the program: it must keep working whatever happens to ours.
        # Counts cuMemAllocAsync inside the window; gpu_profiler.py covers native mode.
        traced("torch_profiler", [sys.executable, "-c", PROFILED_PROGRAM], "--allocator=async"),
    ]


PROFILED_PROGRAM = """
import torch
from torch.profiler import profile, ProfilerActivity
x = torch.randn(1024, 1024, device="cuda")
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    y = x @ x
    torch.cuda.synchronize()
kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
print("profiler saw", len(kernels) > 0)
"""


def run(args):
    os.makedirs(args.results, exist_ok=True)
    records = {}
    for case in cases(args.cumemtrace, args.programs, args.results):
        started = time.monotonic()
        proc = subprocess.run(case["argv"], capture_output=True, timeout=300,
                              env=dict(os.environ, **case.get("env", {})))
        records[case["name"]] = {
            "argv": case["argv"], "traced": case["traced"], "status": proc.returncode,
            "seconds": round(time.monotonic() - started, 2),
            "stdout": proc.stdout.decode(errors="replace"),
            "stderr": proc.stderr.decode(errors="replace"),
        }
        print(f"ran {case['name']}: status {proc.returncode} in {records[case['name']]['seconds']} s",
              flush=True)
    records["cuda_injection_only"] = run_under_daemon(args)
    with open(os.path.join(args.results, "runs.json"), "w") as f:
        json.dump(records, f, indent=1)


def run_under_daemon(args):
    """The program loads the tracer only through CUDA_INJECTION64_PATH (no LD_PRELOAD) and
    reports to a `cumemtrace daemon` instead of a private collector."""
    import signal
    import tempfile
    case = os.path.join(args.results, "cuda_injection_only")
    os.makedirs(case, exist_ok=True)
    sockdir = tempfile.mkdtemp(prefix="cmt-daemon-")
    sock = os.path.join(sockdir, "collector.sock")
    daemon = subprocess.Popen([args.cumemtrace, "daemon", "--socket", sock, "--output-dir", case],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    for _ in range(100):
        if os.path.exists(sock):
            break
        time.sleep(0.05)
    tracer = os.path.join(os.path.dirname(args.cumemtrace), "..", "lib", "cumemtrace",
                          "libcumemtrace-tracer.so")
    env = dict(os.environ, CUDA_INJECTION64_PATH=os.path.realpath(tracer), CUMEMTRACE_SOCKET=sock)
    env.pop("LD_PRELOAD", None)
    env.pop("NVTX_INJECTION64_PATH", None)
    proc = subprocess.run([os.path.join(args.programs, "cuda_phases"),
                           os.path.join(args.results, "cuda_injection_only.expected.json"), "0"],
                          capture_output=True, env=env, timeout=120)
    daemon.send_signal(signal.SIGINT)
    daemon_out, daemon_err = daemon.communicate(timeout=30)
    traces = sorted(f for f in os.listdir(case) if f.endswith(".cmtrace"))
    summary = subprocess.run([args.cumemtrace, "report", "--json", os.path.join(case, traces[0])],
                             capture_output=True) if traces else None
    if summary is not None:
        with open(os.path.join(case, "summary.json"), "wb") as f:
            f.write(summary.stdout)
    print(f"ran cuda_injection_only: status {proc.returncode}, daemon wrote {traces}", flush=True)
    return {"argv": ["CUDA_INJECTION64_PATH=tracer", "cuda_phases"], "traced": True,
            "status": proc.returncode, "stdout": proc.stdout.decode(errors="replace"),
            "stderr": proc.stderr.decode(errors="replace"), "traces": traces,
            "daemon_status": daemon.returncode, "daemon_log": daemon_err.decode(errors="replace")}


class Table:
    def __init__(self):
        self.rows = []

    def check(self, case, what, expected, observed, ok=None):
        if ok is None:
            ok = expected == observed
        shown = lambda v: repr(v) if isinstance(v, str) and "\n" in v else str(v)
        self.rows.append((case, what, shown(expected), shown(observed), bool(ok)))
        return ok

    def close(self, case, what, expected, observed, tolerance):
        # Zero expected means zero observed (a phase that allocates nothing).
        ok = abs(observed - expected) <= tolerance * expected if expected > 0 else observed == 0
        diff = (observed - expected) / expected * 100 if expected else float("nan")
        return self.check(case, what, f"{expected:,} (±{tolerance * 100:g}%)",
                          f"{observed:,} ({diff:+.4f}%)", ok)

    def print(self):
        widths = [max(len(r[i]) for r in self.rows + [("case", "check", "expected", "observed")])
                  for i in range(4)]
        header = ("case", "check", "expected", "observed")
        print("  ".join(h.ljust(w) for h, w in zip(header, widths)) + "  result")
        for r in self.rows:
            print("  ".join(c.ljust(w) for c, w in zip(r[:4], widths)) + ("  PASS" if r[4] else "  FAIL"))
        failed = sum(1 for r in self.rows if not r[4])
        print(f"\n{len(self.rows) - failed} passed, {failed} failed")
        return failed

    def save(self, path):
        with open(path, "w") as f:
            json.dump([dict(zip(("case", "check", "expected", "observed", "pass"), r))
                       for r in self.rows], f, indent=1)


def run_case(command, results, case, env=None):
    """Runs one case's `cumemtrace run` command, writes RESULTS/CASE.log, says so, and returns
    its record (argv, status, seconds, stderr)."""
    started = time.monotonic()
    proc = subprocess.run(command, capture_output=True, timeout=600,
                          env={**os.environ, **(env or {})})
    record = case_record(command, proc.returncode, proc.stderr, started, results, case)
    if env:
        record["env"] = env
    return record


def case_record(command, status, stderr, started, results, case):
    """The record of a case's command that ended with `status` (argv, status, seconds since
    `started`, stderr); writes RESULTS/CASE.log and says so."""
    record = {"argv": command, "status": status,
              "seconds": round(time.monotonic() - started, 2),
              "stderr": stderr.decode(errors="replace")}
    print(f"ran {case}: status {status} in {record['seconds']} s", flush=True)
    with open(os.path.join(results, case + ".log"), "w") as f:
        f.write(f"$ {' '.join(command)}\nstatus {status}\n--- stderr\n{record['stderr']}")
    return record


def export_memory_viz(cumemtrace, run_dir, record):
    """Exports run_dir's trace to run_dir/memory_viz.pickle, if the run left one; the
    export's status and stderr go into the run's record."""
    trace = os.path.join(run_dir, "trace.cmtrace")
    if not os.path.exists(trace):
        return
    export = subprocess.run([cumemtrace, "export", "--format", "memory-viz", "-o",
                             os.path.join(run_dir, "memory_viz.pickle"), "--force", trace],
                            capture_output=True)
    record["export_status"] = export.returncode
    record["export_stderr"] = export.stderr.decode(errors="replace")


def load(path):
    with open(path) as f:
        return json.load(f)


def main_process(summary, argv0_suffix):
    """The traced program's own process (a launcher shell could add others)."""
    for process in summary["processes"]:
        if process["command_line"] and any(arg.endswith(argv0_suffix) for arg in process["command_line"][:2]):
            return process
    return summary["processes"][0]


def device0(process):
    for device in process["devices"]:
        if device["index"] == 0:
            return device
    return None


def phase(process, name):
    for p in process["phases"]:
        if p["name"] == name:
            return p
    return None


def phase_device(p, index=0):
    for d in (p or {}).get("devices", []):
        if d["index"] == index:
            return d
    return {}


def tracer_lines(stderr):
    return [line for line in stderr.splitlines() if line.startswith("cumemtrace:")]


def check_cuda_phases(t, runs, results, name="cuda_phases"):
    r = runs[name]
    t.check(name, "exit status", 4, r["status"])
    t.check(name, "stdout unchanged", runs["cuda_phases_untraced"]["stdout"], r["stdout"])
    expected = load(os.path.join(results, name + ".expected.json"))
    summary = load(os.path.join(results, name, "summary.json"))
    process = main_process(summary, "cuda_phases")
    dev = device0(process)
    if not t.check(name, "device 0 in report", True, dev is not None):
        return
    w, p, s, v = (expected[k] for k in ("weights_bytes", "pool_bytes", "scratch_bytes", "vmm_bytes"))
    t.check(name, "peak bytes", max(w + p + s, w + p + v), dev["peak"]["bytes"])
    by_kind = dev["by_kind"]
    t.check(name, "pinned allocated", expected["pinned_bytes"],
            by_kind.get("PINNED", {}).get("allocated_bytes"))
    t.check(name, "managed allocated", expected["managed_bytes"],
            by_kind.get("MANAGED", {}).get("allocated_bytes"))
    t.check(name, "live at exit (bytes)", 0, dev["live_at_exit"]["bytes"])
    for phase_name, allocated, freed in [("setup", w, 0), ("async", p + s, s), ("vmm", v, 0),
                                         ("host", 0, 0), ("oom", 0, 0), ("teardown", 0, w + p + v)]:
        pd = phase_device(phase(process, phase_name))
        t.check(name, f"{phase_name}: allocated", allocated, pd.get("allocated_bytes"))
        t.check(name, f"{phase_name}: freed", freed, pd.get("freed_bytes"))
    pd = phase_device(phase(process, "async"))
    t.check(name, "async: peak above entry", p + s, pd.get("peak_above_entry_bytes"))
    t.check(name, "async: bytes at entry", w, pd.get("bytes_at_entry"))
    failed = process["failed_allocations"]
    t.check(name, "failed allocations", 1, len(failed))
    if failed:
        t.check(name, "failed: api", "cuMemAlloc", failed[0]["api"])
        t.check(name, "failed: requested bytes", expected["oversized_bytes"], failed[0]["requested_bytes"])
        t.check(name, "failed: phase", "oom", failed[0]["phase"])
        t.check(name, "failed: calling library", "cuda_phases", failed[0]["caller"])
    # Synchronous calls are unwound to the calling module: the program itself here.
    t.check(name, "by library: cuda_phases allocated", w + v,
            dev["by_library"].get("cuda_phases", {}).get("allocated_bytes"))
    notices = [l for l in tracer_lines(r["stderr"])
               if not l.startswith(("cumemtrace: trace written", "cumemtrace: open "))]
    t.check(name, "tracer notices", [], notices)


def check_injection_only(t, runs, results):
    name = "cuda_injection_only"
    r = runs[name]
    t.check(name, "exit status", 0, r["status"])
    t.check(name, "daemon wrote one trace", 1, len(r["traces"]))
    t.check(name, "daemon stopped cleanly", 0, r["daemon_status"])
    if len(r["traces"]) != 1:
        return
    expected = load(os.path.join(results, "cuda_injection_only.expected.json"))
    process = main_process(load(os.path.join(results, name, "summary.json")), "cuda_phases")
    t.check(name, "injection mode", "cuda_injection", process["injection_mode"])
    dev = device0(process)
    w, p, s, v = (expected[k] for k in ("weights_bytes", "pool_bytes", "scratch_bytes", "vmm_bytes"))
    t.check(name, "peak bytes", max(w + p + s, w + p + v), (dev or {}).get("peak", {}).get("bytes"))
    t.check(name, "setup: allocated (NVTX via the driver-loaded tracer)", w,
            phase_device(phase(process, "setup")).get("allocated_bytes"))
    t.check(name, "exit recorded by the tracer", {"source": "tracer", "code": 0},
            {k: process["exit"][k] for k in ("source", "code")})


def check_torch(t, runs, results, name, mode, suffix, steps=5):
    r = runs[name]
    t.check(name, "exit status", 0, r["status"])
    stats = load(os.path.join(results, name + ".stats.json"))
    summary = load(os.path.join(results, name, "summary.json"))
    process = main_process(summary, suffix)
    t.check(name, "allocator mode seen", mode, process["allocator"]["mode"])
    dev = device0(process)
    if not t.check(name, "device 0 in report", True, dev is not None):
        return
    ours = dev["peak"]["bytes"]
    # PyTorch's counters see only its own allocator: its cudaMallocAsync calls (cuMemAllocAsync in the driver) in async mode,
    # its cudaMalloc segments (called from libc10_cuda.so) in native mode. Libraries that
    # allocate for themselves (cuBLAS's workspaces) are in the device peak, not in PyTorch's.
    # With the PyTorch bridge (native mode), libc10_cuda.so's device memory is its tensors,
    # and its segments are a layer of their own (dev["torch"]).
    bridged = process.get("torch_bridge", {}).get("attached", False)
    if mode == "async":
        group, origin, label = dev["by_api"], "cuMemAllocAsync", "max_memory_allocated"
    elif bridged:
        group, origin, label = dev["by_library"], "libc10_cuda.so", "max_memory_allocated"
        t.check(name, "segment peak = max_memory_reserved", stats["max_memory_reserved"],
                dev.get("torch", {}).get("reserved_peak_bytes"))
    else:
        group, origin, label = dev["by_library"], "libc10_cuda.so", "max_memory_reserved"
    t.close(name, f"{origin} peak vs {label}", stats[label],
            group.get(origin, {}).get("peak_bytes", 0), 0.001)
    for key in ("by_api", "by_library"):
        t.check(name, f"device peak = sum of {key} at peak", ours,
                sum(a["live_at_peak_bytes"] for a in dev[key].values()))
    outside = {k: v["live_at_peak_bytes"] for k, v in group.items() if k != origin}
    t.check(name, f"outside {origin} at peak", "shown", f"{outside}", True)
    for phase_name in ("forward", "backward", "optimizer"):
        p = phase(process, phase_name)
        t.check(name, f"{phase_name}: occurrences", steps, (p or {}).get("occurrences"))
        pd = phase_device(p)
        t.check(name, f"{phase_name}: peak within device peak", True,
                0 < pd.get("peak_bytes", 0) <= ours)
    forward = phase_device(phase(process, "forward"))
    t.check(name, "forward allocates (activations)", True, forward.get("allocated_bytes", 0) > 0)


def check(args):
    runs = load(os.path.join(args.results, "runs.json"))
    t = Table()
    check_cuda_phases(t, runs, args.results)
    check_cuda_phases(t, runs, args.results, "cuda_phases_cupti")
    check_injection_only(t, runs, args.results)
    check_torch(t, runs, args.results, "torch_async", "async", "torch_train.py")
    check_torch(t, runs, args.results, "torch_async_cupti", "async", "torch_train.py")
    check_torch(t, runs, args.results, "torch_native", "native", "torch_train.py")
    check_torch(t, runs, args.results, "libtorch_async", "async", "libtorch_train")
    check_torch(t, runs, args.results, "libtorch_native", "native", "libtorch_train")
    profiled = runs["torch_profiler"]
    t.check("torch_profiler", "exit status", 0, profiled["status"])
    t.check("torch_profiler", "the program's profiler still works", "profiler saw True",
            profiled["stdout"].strip())
    # cumemtrace shares CUPTI with the profiler (tracer/sources/cupti/cupti_mux.h): no hand-over,
    # and the product made inside the profiler is in the trace (gpu_profiler.py checks it all).
    t.check("torch_profiler", "cumemtrace kept CUPTI (no hand-over)", False,
            "handed CUPTI over" in profiled["stderr"])
    profiled_process = main_process(load(os.path.join(args.results, "torch_profiler",
                                                      "summary.json")), "python")
    async_allocations = (device0(profiled_process) or {}).get("by_api", {}).get(
        "cuMemAllocAsync", {}).get("allocations", 0)
    t.check("torch_profiler", "allocations inside the profiler traced", ">= 2",
            async_allocations, async_allocations >= 2)
    t.check("torch_exit3", "exit status", 3, runs["torch_exit3"]["status"])
    t.check("torch_sigterm", "exit status (128+SIGTERM)", 143, runs["torch_sigterm"]["status"])
    t.check("torch_quiet", "stdout unchanged", runs["torch_untraced"]["stdout"], runs["torch_quiet"]["stdout"])
    # With --quiet, cumemtrace adds only its final "trace written" and "open" lines to stderr.
    quiet_stderr = "".join(line for line in runs["torch_quiet"]["stderr"].splitlines(True)
                           if not line.startswith(("cumemtrace: trace written", "cumemtrace: open ")))
    t.check("torch_quiet", "stderr unchanged", runs["torch_untraced"]["stderr"], quiet_stderr)
    failed = t.print()
    t.save(os.path.join(args.results, "suite.json"))
    return 1 if failed else 0


def suite_main(doc, run_step, check_step):
    """The command line every GPU suite script shares: `run` (needs the GPU) and `check`."""
    parser = argparse.ArgumentParser(description=doc,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="step", required=True)
    r = sub.add_parser("run")
    r.add_argument("--cumemtrace", required=True)
    r.add_argument("--programs", required=True)
    r.add_argument("--results", required=True)
    c = sub.add_parser("check")
    c.add_argument("--results", required=True)
    args = parser.parse_args()
    if args.step == "run":
        run_step(args)
        return 0
    return check_step(args)


def main():
    return suite_main(__doc__, run, check)


if __name__ == "__main__":
    sys.exit(main())
