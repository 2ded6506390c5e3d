#!/usr/bin/env python3
"""GPU cases of docs/reliability.md, in the two steps of gpu_suite.py:

  gpu_reliability.py run   --cumemtrace BIN --programs DIR --results DIR   (needs the GPU)
  gpu_reliability.py check --results DIR                                   (reads results only)

Cases: a CUDA program that dies of an out-of-memory error; CUDA programs killed by SIGKILL,
SIGSEGV and SIGABRT, or leaving through _exit, right after their last allocation (every
allocation is in the trace: the collector reads what the tracer's sender had not sent yet
from the shared ring); the collector (a daemon) killed under a running CUDA program; a
PyTorch program that starts torch.profiler, another CUPTI client.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gpu_suite import (PROFILED_PROGRAM, Table, device0, load, main_process,  # noqa: E402
                       suite_main, tracer_lines)

GiB = 1 << 30
MiB = 1 << 20
SIGNALS = {"KILL": signal.SIGKILL, "SEGV": signal.SIGSEGV, "ABRT": signal.SIGABRT}
DEATHS = [*SIGNALS, "EXIT"]  # EXIT: _exit(0) right after the work, no exit handlers


def record(proc, started):
    return {"status": proc.returncode, "seconds": round(time.monotonic() - started, 2),
            "stdout": proc.stdout.decode(errors="replace"),
            "stderr": proc.stderr.decode(errors="replace")}


def traced(args, name, command, *options):
    started = time.monotonic()
    out = os.path.join(args.results, name)
    proc = subprocess.run([args.cumemtrace, "run", "-o", out, *options, "--", *command],
                          capture_output=True, timeout=300)
    result = record(proc, started)
    report = subprocess.run([args.cumemtrace, "report", out], capture_output=True, timeout=120)
    result["report_status"] = report.returncode
    result["report_stdout"] = report.stdout.decode(errors="replace")
    result["report_stderr"] = report.stderr.decode(errors="replace")
    print(f"ran {name}: status {proc.returncode}, report {report.returncode}", flush=True)
    return result


def collector_killed(args):
    """A daemon collects a running CUDA program and is killed with SIGKILL one second in."""
    faults = os.path.join(args.programs, "cuda_faults")
    stats = os.path.join(args.results, "collector_killed.stats.json")
    untraced = subprocess.run([faults, "steady", stats + ".untraced", "3000"],
                              capture_output=True, timeout=120)
    sockdir = tempfile.mkdtemp(prefix="cmt-rel-")
    sock = os.path.join(sockdir, "collector.sock")
    daemon = subprocess.Popen([args.cumemtrace, "daemon", "--socket", sock, "--output-dir",
                               os.path.join(args.results, "collector_killed")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    for _ in range(200):
        if os.path.exists(sock):
            break
        time.sleep(0.05)
    tracer = os.path.realpath(os.path.join(os.path.dirname(args.cumemtrace), "..", "lib",
                                           "cumemtrace", "libcumemtrace-tracer.so"))
    env = dict(os.environ, LD_PRELOAD=tracer, CUMEMTRACE_SOCKET=sock)
    env.pop("CUDA_INJECTION64_PATH", None)
    env.pop("NVTX_INJECTION64_PATH", None)
    started = time.monotonic()
    program = subprocess.Popen([faults, "steady", stats, "3000"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(1.0)  # the scenario: the collector dies one second into the run
    daemon.kill()
    daemon.communicate(timeout=30)
    out, err = program.communicate(timeout=120)
    print(f"ran collector_killed: status {program.returncode}", flush=True)
    return {"status": program.returncode, "seconds": round(time.monotonic() - started, 2),
            "stdout": out.decode(errors="replace"), "stderr": err.decode(errors="replace"),
            "untraced_status": untraced.returncode,
            "untraced_stdout": untraced.stdout.decode(errors="replace")}


def run(args):
    os.makedirs(args.results, exist_ok=True)
    faults = os.path.join(args.programs, "cuda_faults")
    records = {"oom": traced(args, "oom", [faults, "oom", os.path.join(args.results, "oom.stats.json")])}
    for name in DEATHS:
        case = "die_" + name
        records[case] = traced(args, case, [faults, "die", name,
                                            os.path.join(args.results, case + ".stats.json"), "2000"])
    records["collector_killed"] = collector_killed(args)
    # The async allocator: every tensor is its own cuMemAllocAsync, which check_profiler
    # counts (`run` leaves PyTorch on its caching allocator by default).
    records["torch_profiler"] = traced(args, "torch_profiler", [sys.executable, "-c", PROFILED_PROGRAM],
                                       "--allocator=async")
    with open(os.path.join(args.results, "runs.json"), "w") as f:
        json.dump(records, f, indent=1)


def check_oom(t, runs, results):
    name = "oom"
    r = runs[name]
    t.check(name, "exit status (the program's)", 3, r["status"])
    t.check(name, "report works", 0, r["report_status"])
    stats = load(os.path.join(results, "oom.stats.json"))
    process = main_process(load(os.path.join(results, name, "summary.json")), "cuda_faults")
    failed = process["failed_allocations"]
    if not t.check(name, "failed allocations", 1, len(failed)):
        return
    f = failed[0]
    t.check(name, "failed request bytes", stats["failed_request_bytes"], f["requested_bytes"])
    t.check(name, "failed request phase", "grow", f["phase"])
    live = stats["load_bytes"] + stats["grow_bytes"]
    t.check(name, "in use when it failed", live, f["device_in_use_bytes"])
    by_phase = {(g["phase"], g["kind"]): g["bytes"]
                for g in device0(process)["peak"]["live_by_phase_and_kind"]}
    t.check(name, "live at peak in load", stats["load_bytes"], by_phase.get(("load", "DEVICE")))
    t.check(name, "live at peak in grow", stats["grow_bytes"], by_phase.get(("grow", "DEVICE")))
    t.check(name, "report text names the failure", True, "failed allocations:" in r["report_stdout"])


def check_death(t, runs, results, sig):
    name = "die_" + sig
    r = runs[name]
    if sig == "EXIT":
        t.check(name, "exit status 0 (_exit)", 0, r["status"])
    else:
        t.check(name, "exit status 128+N", 128 + SIGNALS[sig], r["status"])
    t.check(name, "report works", 0, r["report_status"])
    process = main_process(load(os.path.join(results, name, "summary.json")), "cuda_faults")
    if sig != "EXIT":
        t.check(name, "killed by signal (launcher)", int(SIGNALS[sig]), process["exit"]["signal"])
    stats = load(os.path.join(results, name + ".stats.json"))
    times = stats["allocation_times_ns"]
    api = device0(process)["by_api"].get("cuMemAlloc", {}) if device0(process) else {}
    traced_count = api.get("allocations", 0)
    # Every allocation the tracer recorded is kept (the shared ring), however the program
    # ends; what is still missing is counted as work lost at death.
    t.check(name, f"allocations kept / made ({len(times)} made)", len(times), traced_count)
    t.check(name, "allocations lost at death", 0, len(times) - traced_count)
    # The NVTX range around the work ("steady") is in the trace too.
    t.check(name, "phase steady in the trace", True,
            any(p.get("name") == "steady" for p in process.get("phases", [])))


def check_collector_killed(t, runs):
    name = "collector_killed"
    r = runs[name]
    t.check(name, "exit status unchanged", r["untraced_status"], r["status"])
    # The program allocates for a fixed time, so how many it made varies run to run: its
    # output must be the same but for that number.
    import re
    t.check(name, "stdout unchanged (but for the time-bound count)",
            re.sub(r"\d+", "N", r["untraced_stdout"]), re.sub(r"\d+", "N", r["stdout"]))
    lines = tracer_lines(r["stderr"])
    t.check(name, "exactly one tracer notice", 1, len(lines))
    t.check(name, "notice says tracing stopped", True,
            any("collector went away" in line for line in lines))


def check_profiler(t, runs, results):
    name = "torch_profiler"
    r = runs[name]
    t.check(name, "exit status", 0, r["status"])
    t.check(name, "the profiler saw CUDA kernels", "profiler saw True", r["stdout"].strip())
    summary = load(os.path.join(results, name, "summary.json"))
    process = main_process(summary, "python")
    notices = [n.get("text", "") for n in process.get("notices", [])]
    # Never silent: cumemtrace either kept its timeline (it shares CUPTI with the profiler:
    # the product made inside the profiler is traced) or says from when it lost it.
    dev = device0(process) or {}
    kept = dev.get("by_api", {}).get("cuMemAllocAsync", {}).get("allocations", 0) >= 2
    said = (any("CUPTI" in n or "profiler" in n for n in notices)
            or any("CUPTI" in line or "profiler" in line for line in tracer_lines(r["stderr"])))
    t.check(name, "cumemtrace kept its timeline or says what happened to it", True, kept or said)


def check(args):
    runs = load(os.path.join(args.results, "runs.json"))
    t = Table()
    check_oom(t, runs, args.results)
    for sig in DEATHS:
        check_death(t, runs, args.results, sig)
    check_collector_killed(t, runs)
    check_profiler(t, runs, args.results)
    return 1 if t.print() else 0


def main():
    return suite_main(__doc__, run, check)


if __name__ == "__main__":
    sys.exit(main())
