#!/usr/bin/env python3
"""The out-of-memory post-mortem on the GPU (docs/oom.md), in two steps:

  gpu_oom.py run   --cumemtrace BIN --programs DIR --results DIR   (needs the GPU)
  gpu_oom.py check --results DIR                                   (reads results only)

oom_program.py runs under `cumemtrace run` three times: `fragment` (a request that fits in the
cache's free total but in no free block), `too_large` (twice the device's memory), and
`fragment` again with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True. Each OOM run's trace is
exported with `export --format memory-viz --at oom`. `check` asks, by the byte, against what
PyTorch's own torch.cuda.memory_snapshot() said in the program just before the request:
summary.json's post-mortem of PyTorch's OOM says fragmentation (resp. too_large), its request,
its pool's largest free block and free bytes, and the cache's free total; it says the request
would fit with expandable_segments (resp. would not), and the rerun with them did not raise;
the snapshot at the OOM loads in PyTorch's own torch.cuda._memory_viz functions and its
largest inactive block is the same. Prints a pass/fail table.
"""
import json
import os
import pickle
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gpu_suite import Table, load, main_process, run_case, suite_main  # noqa: E402

PROGRAM = os.path.join(HERE, "oom_program.py")
TORCH_API = "PyTorch caching allocator"
CASES = {
    "fragment": (["--mode", "fragment"], {}),
    "too_large": (["--mode", "too-large"], {}),
    "fragment_expandable": (["--mode", "fragment"],
                            {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}),
}


def run(args):
    os.makedirs(args.results, exist_ok=True)
    records = {}
    for case, (options, env) in CASES.items():
        out = os.path.join(args.results, case)
        stats = os.path.join(args.results, case + ".stats.json")
        command = [args.cumemtrace, "run", "-o", out, "--",
                   sys.executable, PROGRAM, *options, "--stats", stats]
        record = run_case(command, args.results, case, env)
        trace = os.path.join(out, "trace.cmtrace")
        if case != "fragment_expandable" and os.path.exists(trace):
            export = subprocess.run([args.cumemtrace, "export", "--format", "memory-viz",
                                     "--at", "oom", "--force", "-o",
                                     os.path.join(out, "memory_viz_oom.pickle"), trace],
                                    capture_output=True)
            record["export_status"] = export.returncode
            record["export_stderr"] = export.stderr.decode(errors="replace")
        records[case] = record
    with open(os.path.join(args.results, "oom_runs.json"), "w") as f:
        json.dump(records, f, indent=1)


def torch_oom(summary):
    """The post-mortem of PyTorch's first OOM in the program's process, or None."""
    process = main_process(summary, "oom_program.py")
    for failure in process.get("failed_allocations", []):
        if failure["api"] == TORCH_API:
            return failure
    return None


def memory_viz_functions(snapshot):
    """Which of PyTorch's own _memory_viz functions read the snapshot, or why not. Those
    that need nothing but the snapshot: segments() and memory() render through flamegraph.pl,
    which they download first, and the GPU machine reaches no network."""
    try:
        from torch.cuda import _memory_viz
    except Exception as e:  # noqa: BLE001 - any import failure is the answer
        return {"import": f"{type(e).__name__}: {e}"}
    outcome = {}
    for name in ("segsum", "trace", "segment_plot", "trace_plot"):
        try:
            text = getattr(_memory_viz, name)(snapshot)
            outcome[name] = "ok" if text else "empty"
        except Exception as e:  # noqa: BLE001
            outcome[name] = f"{type(e).__name__}: {e}"
    return outcome


def check_oom_case(t, runs, results, case, reason, expandable_fits):
    record = runs.get(case, {})
    t.check(case, "exit status", 0, record.get("status"))
    stats_path = os.path.join(results, case + ".stats.json")
    if not os.path.exists(stats_path):
        t.check(case, "program statistics", "written", "missing", False)
        return
    stats = load(stats_path)
    # Else the fill's own OOM comes first in the trace: the comparisons below would be off.
    t.check(case, "the device was filled at the first try", 1, stats.get("filler_attempts"))
    t.check(case, "the program's request raised OutOfMemoryError", True, stats["raised"])
    failure = torch_oom(load(os.path.join(results, case, "summary.json")))
    t.check(case, "summary has PyTorch's OOM", True, failure is not None)
    if failure is None:
        return
    pm = failure["post_mortem"]
    key = f"{pm['pool']}/{pm['stream']}"
    t.check(case, "post_mortem.reason", reason, pm["reason"])
    t.check(case, "request_bytes", stats["request_bytes"], pm["request_bytes"])
    t.check(case, f"largest free block of {key} (= memory_snapshot)",
            stats["largest_free_block"].get(key, 0), pm["largest_free_block_bytes"])
    t.check(case, f"free bytes of {key} (= memory_snapshot)", stats["free_bytes"].get(key, 0),
            pm["pool_free_bytes"])
    t.check(case, "cache free total (= memory_snapshot)", stats["free_total_bytes"],
            pm["cache_free_bytes"])
    t.check(case, "would fit with expandable_segments", expandable_fits,
            pm["would_fit"]["expandable_segments"]["fits"])
    print(f"{case}: {pm['explanation']}")

    # The snapshot at the OOM: the same largest free block, and PyTorch's page code reads it.
    t.check(case, "export --at oom status", 0, record.get("export_status"))
    viz_path = os.path.join(results, case, "memory_viz_oom.pickle")
    if not os.path.exists(viz_path):
        return
    with open(viz_path, "rb") as f:
        snapshot = pickle.load(f)
    largest = max([b["size"] for s in snapshot["segments"] if s["segment_type"] == pm["pool"]
                   for b in s["blocks"] if b["state"] == "inactive"] or [0])
    t.check(case, "snapshot at oom: largest inactive block", pm["largest_free_block_bytes"],
            largest)
    for name, outcome in memory_viz_functions(snapshot).items():
        t.check(case, f"torch.cuda._memory_viz.{name}(snapshot)", "ok", outcome)


def check(args):
    runs = load(os.path.join(args.results, "oom_runs.json"))
    t = Table()
    check_oom_case(t, runs, args.results, "fragment", "fragmentation", True)
    check_oom_case(t, runs, args.results, "too_large", "too_large", False)
    # The same program with expandable_segments: the request fits.
    case = "fragment_expandable"
    t.check(case, "exit status", 0, runs.get(case, {}).get("status"))
    stats_path = os.path.join(args.results, case + ".stats.json")
    raised = load(stats_path)["raised"] if os.path.exists(stats_path) else None
    t.check(case, "the same request did not raise", False, raised)
    failed = t.print()
    t.save(os.path.join(args.results, "oom_suite.json"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(suite_main(__doc__, run, check))
