#!/usr/bin/env python3
"""The GPU checks that the answers built on the bytes are right on real training scripts,
in two steps like gpu_suite.py:

  gpu_fidelity.py run   --cumemtrace BIN --programs DIR --results DIR   (needs the GPU)
  gpu_fidelity.py check --results DIR                                   (reads results only)

- one-step EP and its backprop twin (build, one step, exit) at three depths: persistent at
  the peak >= weights + optimizer buffers + cuBLAS's own memory live at the peak, in both;
  and in `cumemtrace sweep` over the same runs, activation = peak - persistent to the byte;
- a GPT-2-like model with an embedding (gpt_train.py): CUB's ranges (NVTX domain CCCL) fold
  into backward and stay out of the phases and the iteration pattern; the runtime's retried
  cuMemAllocAsync (CUDA_ERROR_INVALID_CONTEXT, one per autograd thread) is a driver retry, not
  a failed allocation; its memory_viz export passes check_memory_viz.py;
- expandable_segments:True: PyTorch's cuMemCreate probe (CUDA_ERROR_NOT_PERMITTED) is a
  driver retry, and nothing is a failed allocation;
- `run --phase` on a module the program imports late (sys.path.insert, then an import inside
  a function): every phase recorded, in every iteration, and no --phase warning.
"""
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gpu_suite import Table, load, suite_main  # noqa: E402

DEPTHS = ["10", "100", "1000"]
EP_METHODS = {"settling/free": "settle_free", "settling/nudged": "settle_nudged",
              "energy": "energy", "contrast": "contrast", "update": "update"}


def cases(cm, programs, r):
    py = sys.executable
    ep = os.path.join(HERE, "ep_train.py")
    out = lambda name: os.path.join(r, name)
    c = {}
    for depth in DEPTHS:
        for mode, extra in (("ep", []), ("bp", ["--bp"])):
            name = f"onestep_{mode}_{depth}"
            c[name] = [cm, "run", "-o", out(name), "--", py, ep, *extra, "--depth", depth,
                       "--iterations", "1", "--momentum", "--verify", out(name + ".verify.json")]
    phase_flags = []
    for phase, method in EP_METHODS.items():
        phase_flags += ["--phase", f"{phase}=ep_train:EPTrainer.{method}"]
    gpt = out("gpt_async")
    # The async allocator's own retries (item 3) are what this run is about.
    c["gpt_async"] = [cm, "run", "-o", gpt, "--allocator=async", "--", py,
                      os.path.join(HERE, "gpt_train.py"), "--stats", out("gpt_async.stats.json")]
    gpt_native = out("gpt_native")
    c["gpt_native"] = [cm, "run", "-o", gpt_native, "--", py, os.path.join(HERE, "gpt_train.py"),
                       "--stats", out("gpt_native.stats.json")]
    check_viz = os.path.join(HERE, "..", "..", "collector", "output", "tests",
                             "check_memory_viz.py")
    for name, trace in (("gpt_memory_viz", gpt), ("gpt_native_memory_viz", gpt_native)):
        c[name] = ["bash", "-c",
                   f"'{cm}' export --format memory-viz -o '{trace}.pickle' "
                   f"'{trace}/trace.cmtrace' && "
                   f"'{cm}' report --json '{trace}/trace.cmtrace' > '{trace}.summary.json' && "
                   f"'{py}' '{check_viz}' '{trace}.pickle' '{trace}.summary.json'"]
    c["expandable"] = ([cm, "run", "-o", out("expandable"), "--", py,
                        os.path.join(HERE, "torch_train.py"), "--steps", "3"],
                       {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
    c["late_import"] = [cm, "run", "-o", out("late_import"), *phase_flags, "--", py,
                        os.path.join(HERE, "late_import", "run_ep.py"), "--no-nvtx",
                        "--depth", "50", "--iterations", "4"]
    one_step = "--iterations 1 --momentum"
    c["onestep_sweep"] = [cm, "sweep", "-o", out("onestep_sweep"), "--param",
                          "depth=" + ",".join(DEPTHS),
                          "--run", f"EP={py} {ep} --depth {{depth}} {one_step}",
                          "--run", f"BP={py} {ep} --bp --depth {{depth}} {one_step}"]
    return c


def run(args):
    args.results = os.path.abspath(args.results)
    os.makedirs(args.results, exist_ok=True)
    records = {}
    for name, argv in cases(args.cumemtrace, args.programs, args.results).items():
        argv, env = argv if isinstance(argv, tuple) else (argv, {})
        started = time.monotonic()
        proc = subprocess.run(argv, capture_output=True, timeout=560,
                              env={**os.environ, **env})
        records[name] = {"argv": argv, "status": proc.returncode,
                         "seconds": round(time.monotonic() - started, 2),
                         "stdout": proc.stdout.decode(errors="replace"),
                         "stderr": proc.stderr.decode(errors="replace")}
        print(f"ran {name}: status {proc.returncode} in {records[name]['seconds']} s", flush=True)
    with open(os.path.join(args.results, "fidelity_runs.json"), "w") as f:
        json.dump(records, f, indent=1)


def main_process(results, case):
    summary = load(os.path.join(results, case, "summary.json"))
    return max(summary["processes"],
               key=lambda p: max([d["peak"]["bytes"] for d in p["devices"]] or [0]))


def device0(process):
    return next(d for d in process["devices"] if d["index"] == 0)


def cublas_at_peak(device):
    return sum(v["live_at_peak_bytes"] for k, v in device["by_library"].items()
               if "cublas" in k.lower())


def check_one_step(t, r, runs):
    expected_floor = {}
    for depth in DEPTHS:
        for mode in ("ep", "bp"):
            case = f"onestep_{mode}_{depth}"
            t.check(case, "exit status", 0, runs[case]["status"])
            if runs[case]["status"] != 0:
                continue
            verify = load(os.path.join(r, case + ".verify.json"))
            d = device0(main_process(r, case))
            lifetime = d["lifetime_at_peak"]
            persistent = lifetime["bytes_by_class"].get("persistent", 0)
            floor = verify["weights_bytes"] + verify["optimizer_bytes"] + cublas_at_peak(d)
            expected_floor[(mode.upper(), depth)] = floor
            t.check(case, f"persistent at peak {persistent} >= weights {verify['weights_bytes']}"
                    f" + optimizer {verify['optimizer_bytes']} + cuBLAS {cublas_at_peak(d)}",
                    True, persistent >= floor)
            t.check(case, "activation memory = peak - persistent",
                    d["peak"]["bytes"] - persistent, lifetime["activation_memory_bytes"])
    t.check("onestep_sweep", "exit status", 0, runs["onestep_sweep"]["status"])
    path = os.path.join(r, "onestep_sweep", "sweep.csv")
    lines = open(path).read().strip().splitlines() if os.path.exists(path) else []
    rows = [dict(zip(lines[0].split(","), l.split(","))) for l in lines[1:]] if lines else []
    t.check("onestep_sweep", "rows", 2 * len(DEPTHS), len(rows))
    for row in rows:
        what = f"{row['label']} depth {row['depth']}"
        peak, persistent = int(row["peak_bytes"]), int(row["persistent_bytes"])
        t.check("onestep_sweep", f"{what}: activation = peak - persistent",
                peak - persistent, int(row["activation_memory_bytes"]))
        floor = expected_floor.get((row["label"], row["depth"]))
        if floor is not None:
            t.check("onestep_sweep", f"{what}: persistent {persistent} >= {floor}", True,
                    persistent >= floor)


LIBRARY_DOMAINS = ("CCCL", "NCCL", "NVSHMEM", "cuDNN", "cuBLAS", "cuFFT", "cuSPARSE", "cuSOLVER",
                   "cuRAND", "cuTENSOR", "nvJPEG", "NPP")


def check_gpt(t, r, runs):
    case = "gpt_async"
    t.check(case, "exit status", 0, runs[case]["status"])
    if runs[case]["status"] != 0:
        return
    process = main_process(r, case)
    names = [p["name"] for p in process["phases"]]
    t.check(case, "phases (library ranges rolled up)", ["forward", "backward", "optimizer"], names)
    t.check(case, "no library domain among the phases", [],
            [n for n in names if n.split(":")[0] in LIBRARY_DOMAINS])
    t.check(case, "iteration pattern", "forward > backward > optimizer",
            process["iterations"]["range"])
    t.check(case, f"library ranges folded into their phase ({process['rolled_up_ranges']})", True,
            process["rolled_up_ranges"] > 0)
    t.check(case, "failed allocations", [], [(f["api"], f["error_name"])
                                             for f in process["failed_allocations"]])
    t.check(case, "phase table: failed", 0, sum(d["failed_allocations"] for p in process["phases"]
                                                 for d in p["devices"]))
    retries = [(f["api"], f["error_name"]) for f in process["driver_retries"]]
    t.check(case, f"driver retries {sorted(set(retries))} (x{len(retries)}), none out-of-memory",
            True, len(retries) > 0 and all("OUT_OF_MEMORY" not in e for _, e in retries))
    stats = load(os.path.join(r, "gpt_async.stats.json"))
    async_api = [v["peak_bytes"] for k, v in device0(process)["by_api"].items()
                 if "MemAllocAsync" in k or "MallocAsync" in k]
    t.check(case, "stream-ordered allocations' own peak = torch.cuda.max_memory_allocated()",
            stats["max_memory_allocated"], max(async_api or [None]))
    for name in ("gpt_memory_viz", "gpt_native_memory_viz"):
        viz = runs[name]
        t.check(name, "check_memory_viz.py " + viz["stdout"].strip()[:120], 0, viz["status"],
                viz["status"] == 0 and "ok:" in viz["stdout"])
    case = "gpt_native"
    t.check(case, "exit status", 0, runs[case]["status"])
    if runs[case]["status"] == 0:
        process = main_process(r, case)
        stats = load(os.path.join(r, "gpt_native.stats.json"))
        torch_layers = device0(process).get("torch", {})
        t.check(case, "tensor peak = max_memory_allocated", stats["max_memory_allocated"],
                torch_layers.get("allocated_peak_bytes"))
        t.check(case, "segment peak = max_memory_reserved", stats["max_memory_reserved"],
                torch_layers.get("reserved_peak_bytes"))
        t.check(case, "library ranges folded into their phase", True,
                process["rolled_up_ranges"] > 0)

    case = "expandable"
    t.check(case, "exit status", 0, runs[case]["status"])
    if runs[case]["status"] != 0:
        return
    process = main_process(r, case)
    t.check(case, "failed allocations", [], [(f["api"], f["error_name"])
                                             for f in process["failed_allocations"]])
    t.check(case, "phase table: failed", 0, sum(d["failed_allocations"] for p in process["phases"]
                                                 for d in p["devices"]))
    retries = sorted({(f["api"], f["error_name"]) for f in process["driver_retries"]})
    t.check(case, f"driver retries {retries} include the cuMemCreate probe", True,
            any(api.startswith("cuMemCreate") for api, _ in retries))


def check_late_import(t, r, runs):
    case = "late_import"
    t.check(case, "exit status", 0, runs[case]["status"])
    if runs[case]["status"] != 0:
        return
    process = main_process(r, case)
    occurrences = {p["name"]: p["occurrences"] for p in process["phases"]}
    t.check(case, "phases, each in every iteration", {p: 4 for p in EP_METHODS}, occurrences)
    warnings = [l for l in runs[case]["stderr"].splitlines() if "--phase" in l]
    t.check(case, "no --phase warnings", [], warnings)


def check(args):
    r = args.results
    runs = load(os.path.join(r, "fidelity_runs.json"))
    t = Table()
    check_one_step(t, r, runs)
    check_gpt(t, r, runs)
    check_late_import(t, r, runs)
    failed = t.print()
    print("\none-step memory vs depth (cumemtrace sweep):\n" + runs["onestep_sweep"]["stdout"])
    t.save(os.path.join(r, "fidelity_suite.json"))
    return 1 if failed else 0


def main():
    return suite_main(__doc__, run, check)


if __name__ == "__main__":
    sys.exit(main())
