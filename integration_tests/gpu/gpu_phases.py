#!/usr/bin/env python3
"""The GPU checks of phase analysis (EP and backprop training), in two steps like
gpu_suite.py:

  gpu_phases.py run   --cumemtrace BIN --programs DIR --results DIR   (needs the GPU)
  gpu_phases.py check --results DIR                                   (reads results only)

- EP and BP trainers labeled with NVTX: every phase's rise above entry (median over
  iterations 2..N) agrees within 1% with the program's own torch.cuda.max_memory_allocated()
  measurement around that phase (--verify);
- the same EP trainer without NVTX, labeled only through `run --phase`, gives the same
  phase table as the NVTX-labeled run;
- the unlabeled LibTorch program's inferred forward/backward(/optimizer) agree with its
  NVTX-labeled twin within 1%;
- `cumemtrace sweep` over depth 10..500 for EP and BP: the memory-vs-depth table.
"""
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gpu_suite import Table, load, suite_main  # noqa: E402

EP_PHASES = ["settling/free", "settling/nudged", "energy", "contrast", "update"]
EP_METHODS = {"settling/free": "settle_free", "settling/nudged": "settle_nudged",
              "energy": "energy", "contrast": "contrast", "update": "update"}
VERIFY_NAME = {"settling/free": "settle_free", "settling/nudged": "settle_nudged"}
DEPTHS = "10,50,100,200,500"


def run(args):
    args.results = os.path.abspath(args.results)
    os.makedirs(args.results, exist_ok=True)
    ep = [sys.executable, os.path.join(HERE, "ep_train.py")]
    cm = args.cumemtrace
    r = args.results
    out = lambda name: os.path.join(r, name)
    phase_flags = []
    for phase, method in EP_METHODS.items():
        phase_flags += ["--phase", f"{phase}=ep_train:EPTrainer.{method}"]
    libtorch = os.path.join(args.programs, "libtorch_train")
    cases = {
        "ep_nvtx": [cm, "run", "-o", out("ep_nvtx"), "--", *ep, "--depth", "50",
                    "--iterations", "6", "--verify", out("ep_nvtx.verify.json")],
        "ep_phase_flag": [cm, "run", "-o", out("ep_phase_flag"), *phase_flags, "--", *ep,
                          "--no-nvtx", "--depth", "50", "--iterations", "6"],
        "bp_nvtx": [cm, "run", "-o", out("bp_nvtx"), "--", *ep, "--bp", "--depth", "50",
                    "--iterations", "6", "--verify", out("bp_nvtx.verify.json")],
        "libtorch_labeled": [cm, "run", "-o", out("libtorch_labeled"), "--", libtorch,
                             "--steps", "6"],
        "libtorch_unlabeled": [cm, "run", "-o", out("libtorch_unlabeled"), "--", libtorch,
                               "--steps", "6", "--no-nvtx"],
        "sweep": [cm, "sweep", "-o", out("sweep"), "--param", f"depth={DEPTHS}",
                  "--run", f"EP={sys.executable} {ep[1]} --depth {{depth}}",
                  "--run", f"BP={sys.executable} {ep[1]} --bp --depth {{depth}}"],
    }
    records = {}
    for name, argv in cases.items():
        started = time.monotonic()
        proc = subprocess.run(argv, capture_output=True, timeout=560)
        records[name] = {"argv": argv, "status": proc.returncode,
                         "seconds": round(time.monotonic() - started, 2),
                         "stdout": proc.stdout.decode(errors="replace"),
                         "stderr": proc.stderr.decode(errors="replace")}
        print(f"ran {name}: status {proc.returncode} in {records[name]['seconds']} s", flush=True)
    with open(os.path.join(r, "phase_runs.json"), "w") as f:
        json.dump(records, f, indent=1)


def main_process(results, case):
    summary = load(os.path.join(results, case, "summary.json"))
    return max(summary["processes"], key=lambda p: max([d["peak"]["bytes"] for d in p["devices"]]
                                                       or [0]))


def iteration_stats(process):
    out = {}
    for s in process["iterations"]["phases"]:
        for d in s["devices"]:
            if d["index"] == 0:
                out[s["phase"]] = d
    return out


def lower_median(values):
    values = sorted(values)
    return values[(len(values) - 1) // 2]


def check_against_verify(t, results, case, phases, steps):
    runs = load(os.path.join(results, "phase_runs.json"))
    t.check(case, "exit status", 0, runs[case]["status"])
    process = main_process(results, case)
    verify = load(os.path.join(results, case + ".verify.json"))["above_entry"]
    stats = iteration_stats(process)
    t.check(case, "iterations", steps, process["iterations"]["count"])
    for phase in phases:
        own = verify.get(VERIFY_NAME.get(phase, phase), [])
        ours = stats.get(phase, {}).get("peak_above_entry_bytes") or {}
        t.check(case, f"{phase}: iterations with the phase", steps - 1, ours.get("count"))
        if len(own) < 2 or not ours:
            t.check(case, f"{phase}: measured", True, False)
            continue
        t.close(case, f"{phase}: +above entry (median, steady) vs in-process",
                lower_median(own[1:]), ours["median"], 0.01)


def phase_table(process):
    table = {}
    for p in process["phases"]:
        d = next((d for d in p["devices"] if d["index"] == 0), {})
        table[p["name"]] = (p["occurrences"], d.get("allocated_bytes"), d.get("freed_bytes"))
    return table


def check(args):
    r = args.results
    runs = load(os.path.join(r, "phase_runs.json"))
    t = Table()
    check_against_verify(t, r, "ep_nvtx", EP_PHASES, 6)
    check_against_verify(t, r, "bp_nvtx", ["forward", "backward", "optimizer"], 6)

    # --phase labels give the NVTX-labeled run's table.
    t.check("ep_phase_flag", "exit status", 0, runs["ep_phase_flag"]["status"])
    labeled = main_process(r, "ep_nvtx")
    flagged = main_process(r, "ep_phase_flag")
    nvtx_table, flag_table = phase_table(labeled), phase_table(flagged)
    t.check("ep_phase_flag", "phases", sorted(nvtx_table), sorted(flag_table))
    for phase in EP_PHASES:
        a, b = nvtx_table.get(phase, (0, 0, 0)), flag_table.get(phase, (0, 0, 0))
        t.check("ep_phase_flag", f"{phase}: occurrences", a[0], b[0])
        t.close("ep_phase_flag", f"{phase}: allocated vs NVTX run", a[1] or 0, b[1] or 0, 0.01)
        t.close("ep_phase_flag", f"{phase}: freed vs NVTX run", a[2] or 1, b[2] or 0, 0.01)
    a_stats, b_stats = iteration_stats(labeled), iteration_stats(flagged)
    for phase in EP_PHASES:
        a = (a_stats.get(phase, {}).get("peak_above_entry_bytes") or {}).get("median", 0)
        b = (b_stats.get(phase, {}).get("peak_above_entry_bytes") or {}).get("median", 0)
        t.close("ep_phase_flag", f"{phase}: +above entry median vs NVTX run", a, b, 0.01)
    warnings = [l for l in runs["ep_phase_flag"]["stderr"].splitlines() if "--phase" in l]
    t.check("ep_phase_flag", "no --phase warnings", [], warnings)

    # Inferred phases of the unlabeled LibTorch program against its labeled twin.
    for case in ("libtorch_labeled", "libtorch_unlabeled"):
        t.check(case, "exit status", 0, runs[case]["status"])
    twin = main_process(r, "libtorch_labeled")
    unlabeled = main_process(r, "libtorch_unlabeled")
    inference = unlabeled["phase_inference"]
    t.check("libtorch_unlabeled", "phases inferred", True, inference["applied"])
    t.check("libtorch_unlabeled", "iterations", 6, unlabeled["iterations"]["count"])
    twin_stats, inferred_stats = iteration_stats(twin), iteration_stats(unlabeled)
    for phase in ("forward", "backward", "optimizer"):
        for metric in ("peak_above_entry_bytes", "net_change_bytes"):
            a = (twin_stats.get(phase, {}).get(metric) or {}).get("median")
            b = (inferred_stats.get(phase, {}).get(metric) or {}).get("median")
            if a is None or b is None:
                t.check("libtorch_unlabeled", f"{phase}: {metric} measured", True, False)
            elif a == 0:
                t.check("libtorch_unlabeled", f"{phase}: {metric} (median) vs labeled", a, b)
            else:
                t.close("libtorch_unlabeled", f"{phase}: {metric} (median) vs labeled",
                        abs(a), abs(b), 0.01)
    t.close("libtorch_unlabeled", "device peak vs labeled",
            max(d["peak"]["bytes"] for d in twin["devices"]),
            max(d["peak"]["bytes"] for d in unlabeled["devices"]), 0.01)

    # The sweep: every run succeeded and the table is there.
    sweep = runs["sweep"]
    t.check("sweep", "exit status", 0, sweep["status"])
    csv_path = os.path.join(r, "sweep", "sweep.csv")
    rows = open(csv_path).read().strip().splitlines()[1:] if os.path.exists(csv_path) else []
    t.check("sweep", "runs in sweep.csv", 2 * len(DEPTHS.split(",")), len(rows))
    failed = t.print()
    print("\nmemory vs depth (cumemtrace sweep):\n" + sweep["stdout"])
    t.save(os.path.join(r, "phases_suite.json"))
    return 1 if failed else 0


def main():
    return suite_main(__doc__, run, check)


if __name__ == "__main__":
    sys.exit(main())
