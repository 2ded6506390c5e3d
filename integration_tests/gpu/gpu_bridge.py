#!/usr/bin/env python3
"""The PyTorch bridge on the GPU (docs/design.md "Tensors"), in two steps like gpu_suite.py:

  gpu_bridge.py run   --cumemtrace BIN --programs DIR --results DIR   (needs the GPU)
  gpu_bridge.py check --results DIR                                   (reads results only)

Each program (ResNet-like, the same then an MLP step captured in a CUDA graph, GPT-like, GPT-like
with expandable segments, one EP training step, with and without roundup_power2_divisions,
the LibTorch program) runs untraced, under `cumemtrace run` (the default: PyTorch's allocator
left as it is, tensors from the bridge) and under `--allocator=async`. `check` asks, per
program: tensor peak == torch.cuda.max_memory_allocated() and segment peak ==
max_memory_reserved() by the byte, the allocator's counters agree with the rebuilt blocks at
every event, lifetime classes at the peak match the async run within allocator rounding,
exit status and stdout are those of the untraced run, and the memory_viz export holds real
segments with real blocks. Prints a pass/fail table; logs and outputs stay in --results.
GPU_BRIDGE_CASES=NAME[,NAME] runs and checks only those programs.
"""
import json
import os
import pickle
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gpu_suite import (Table, device0, export_memory_viz, load, main_process, phase,  # noqa: E402
                       suite_main, tracer_lines)

MiB = 1 << 20
EXPANDABLE = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
# torch rounds small requests above 2 KiB to quarters of powers of 2: those tensors' blocks
# are not the request in 512-byte steps, and the bridge must read their counters.
DIVISIONS = {"PYTORCH_CUDA_ALLOC_CONF": "roundup_power2_divisions:4"}


def programs(programs_dir, results):
    py = [sys.executable, os.path.join(HERE, "bridge_program.py")]
    stats = lambda name: ["--stats", os.path.join(results, name + ".stats.json")]
    libtorch = os.path.join(programs_dir, "libtorch_train")
    # name -> (argv without --stats, environment, suffix naming the process)
    table = {
        "resnet": (py + ["--workload", "resnet", "--steps", "3", "--reset-accumulated"], {},
                   "bridge_program.py"),
        "gpt": (py + ["--workload", "gpt", "--steps", "3"], {}, "bridge_program.py"),
        # Then an MLP step captured in a CUDA graph, the run's peak: a private pool's tensors.
        "resnet_graph": (py + ["--workload", "resnet", "--steps", "2", "--cuda-graph"], {},
                         "bridge_program.py"),
        "gpt_expandable": (py + ["--workload", "gpt", "--steps", "3"], EXPANDABLE,
                           "bridge_program.py"),
        "ep": (py + ["--workload", "ep50", "--steps", "1"], {}, "bridge_program.py"),
        "ep_divisions": (py + ["--workload", "ep50", "--steps", "1"], DIVISIONS,
                         "bridge_program.py"),
        "libtorch": ([libtorch, "--steps", "5"], {}, "libtorch_train"),
    }
    only = [n for n in os.environ.get("GPU_BRIDGE_CASES", "").split(",") if n]
    unknown = sorted(set(only) - set(table))
    if unknown:
        sys.exit(f"GPU_BRIDGE_CASES: no program named {', '.join(unknown)}")
    return {n: v for n, v in table.items() if not only or n in only}, stats


def run(args):
    os.makedirs(args.results, exist_ok=True)
    table, stats = programs(args.programs, args.results)
    records = {}
    for name, (argv, env, _) in table.items():
        for variant, options in (("untraced", None), ("native", []), ("async", ["--allocator=async"])):
            case = f"{name}_{variant}"
            command = argv + stats(case)
            if options is not None:
                command = [args.cumemtrace, "run", "-o", os.path.join(args.results, case),
                           *options, "--", *command]
            started = time.monotonic()
            proc = subprocess.run(command, capture_output=True, timeout=600,
                                  env=dict(os.environ, **env))
            records[case] = {"argv": command, "env": env, "status": proc.returncode,
                             "seconds": round(time.monotonic() - started, 2),
                             "stdout": proc.stdout.decode(errors="replace"),
                             "stderr": proc.stderr.decode(errors="replace")}
            if variant == "native":
                # The memory_viz export of the traced run (native: the bridge's segments).
                export_memory_viz(args.cumemtrace, os.path.join(args.results, case),
                                  records[case])
            print(f"ran {case}: status {proc.returncode} in {records[case]['seconds']} s",
                  flush=True)
            with open(os.path.join(args.results, case + ".log"), "w") as f:
                f.write(f"$ {' '.join(command)}\nstatus {proc.returncode}\n--- stdout\n"
                        f"{records[case]['stdout']}--- stderr\n{records[case]['stderr']}")
    with open(os.path.join(args.results, "bridge_runs.json"), "w") as f:
        json.dump(records, f, indent=1)


def lifetime_bytes(device):
    # null for a process without forward and backward phases (docs/summary.md)
    return ((device or {}).get("lifetime_at_peak") or {}).get("bytes_by_class", {})


def check_memory_viz(t, results, case, native_device):
    path = os.path.join(results, case, "memory_viz.pickle")
    if not t.check(case, "memory_viz export written", True, os.path.exists(path)):
        return
    with open(path, "rb") as f:
        snapshot = pickle.load(f)
    segments = [s for s in snapshot["segments"] if s.get("device") == 0]
    states = {b["state"] for s in segments for b in s["blocks"]}
    t.check(case, "memory_viz: block states", "active_allocated and inactive",
            sorted(states), {"active_allocated", "inactive"} <= states)
    tiled = all(sum(b["size"] for b in s["blocks"]) == s["total_size"] for s in segments)
    t.check(case, "memory_viz: blocks tile each segment", True, tiled)
    actions = {e["action"] for trace in snapshot["device_traces"] for e in trace}
    t.check(case, "memory_viz: trace has alloc and segment_alloc", True,
            {"alloc", "segment_alloc"} <= actions, {"alloc", "segment_alloc"} <= actions)
    # At the end, the snapshot's segments are what the allocator still reserves.
    t.check(case, "memory_viz: segments live at exit", "some", len(segments), len(segments) > 0)


def check_program(t, runs, results, name, suffix):
    untraced = runs[f"{name}_untraced"]
    native, asynchronous = runs[f"{name}_native"], runs[f"{name}_async"]
    t.check(name, "untraced run", 0, untraced["status"])
    for variant, r in (("native", native), ("async", asynchronous)):
        t.check(f"{name}_{variant}", "exit status as untraced", untraced["status"], r["status"])
        t.check(f"{name}_{variant}", "stdout as untraced", untraced["stdout"], r["stdout"])
    case = f"{name}_native"
    summary_path = os.path.join(results, case, "summary.json")
    if not t.check(case, "summary written", True, os.path.exists(summary_path)):
        return
    stats = load(os.path.join(results, case + ".stats.json"))
    process = main_process(load(summary_path), suffix)
    bridge = process.get("torch_bridge", {})
    t.check(case, "bridge attached", True, bridge.get("attached"))
    t.check(case, "PYTORCH_CUDA_ALLOC_CONF as the user had it", stats.get("alloc_conf", ""),
            process["allocator"]["pytorch_alloc_conf"])
    t.check(case, "allocator counters agree at every event", 0, bridge.get("counter_mismatches"))
    t.check(case, "allocator events lost", 0, bridge.get("lost_events"))
    t.check(case, "block sizes estimated (info)", "any", bridge.get("estimated_block_sizes"), True)
    # The shim found torch's rounding config: small-pool tensors came without a counter read.
    t.check(case, "small-pool blocks sent rounded", "> 0", bridge.get("rounded_blocks"),
            (bridge.get("rounded_blocks") or 0) > 0)
    dev = device0(process)
    if not t.check(case, "device 0 in report", True, dev is not None):
        return
    torch_layers = dev.get("torch", {})
    t.check(case, "tensor peak = max_memory_allocated", stats["max_memory_allocated"],
            torch_layers.get("allocated_peak_bytes"))
    t.check(case, "segment peak = max_memory_reserved", stats["max_memory_reserved"],
            torch_layers.get("reserved_peak_bytes"))
    t.check(case, "fragmentation at the tensor peak (info)", "shown",
            torch_layers.get("fragmentation_at_peak_bytes"), True)
    t.check(case, "memory PyTorch never sees (info)", "shown",
            torch_layers.get("other_device_peak_bytes"), True)
    notices = [l for l in tracer_lines(native["stderr"]) if "torch_bridge" in l or "tensors are not seen" in l]
    t.check(case, "no bridge notice", [], notices)

    # Lifetime classes at the peak, against the async run of the same program: equal up to
    # the allocator's rounding (blocks of 512 bytes and up; a tensor that got a whole unsplit
    # free block is larger by less than 1 MiB).
    async_summary = os.path.join(results, f"{name}_async", "summary.json")
    if not t.check(f"{name}_async", "summary written", True, os.path.exists(async_summary)):
        return
    other = device0(main_process(load(async_summary), suffix))
    ours, theirs = lifetime_bytes(dev), lifetime_bytes(other)
    t.check(case, "lifetime classes beyond persistent", "some activation/temporary bytes",
            ours, any(v > 0 for k, v in ours.items() if k != "persistent"))
    for cls in sorted(set(ours) | set(theirs)):
        a, b = ours.get(cls, 0), theirs.get(cls, 0)
        tolerance = max(2 * MiB, 0.02 * max(a, b))
        t.check(case, f"lifetime {cls} vs async (±{tolerance / MiB:.1f} MiB)", f"{b:,}", f"{a:,}",
                abs(a - b) <= tolerance)
    for phase_name in ("forward", "backward", "optimizer", "settle_free", "settle_nudged"):
        p = phase(process, phase_name)
        if p is not None:
            t.check(case, f"{phase_name}: phase seen with tensors", True,
                    any(d.get("allocated_bytes", 0) > 0 for d in p.get("devices", [])))
    check_memory_viz(t, results, case, dev)


def check(args):
    runs = load(os.path.join(args.results, "bridge_runs.json"))
    table, _ = programs("", args.results)
    t = Table()
    for name, (_, _, suffix) in table.items():
        check_program(t, runs, args.results, name, suffix)
    failed = t.print()
    t.save(os.path.join(args.results, "bridge_suite.json"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(suite_main(__doc__, run, check))
