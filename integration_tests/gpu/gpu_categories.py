#!/usr/bin/env python3
"""What the memory is (docs/phases.md, "Categories"), in two steps:

  gpu_categories.py run   --cumemtrace BIN --programs DIR --results DIR   (needs the GPU)
  gpu_categories.py check --results DIR                                   (reads results only)

categories_program.py trains a GPT-2-like model (AdamW), a ResNet-18-like one (SGD with
momentum, BatchNorm buffers) and a deep MLP (Adam) for three steps, and runs the EP
library's one-step measurement shape (one backprop step of a deep MLP, then exit) at depths
10, 100 and 300; each under plain `cumemtrace run` and unmodified. The program reads its own
objects at the end (model.parameters(), model.buffers(), the parameters' .grad,
optimizer.state) and finds the allocator's blocks that hold them (memory_snapshot()).

`check` asks, by the byte: each category's own peak over the run (parameters, buffers,
gradients, optimizer state) equals the program's blocks of those objects (their storages
are all live together at the end of a step), all from objects, none inferred; parameters and
buffers at the tensor peak equal them too; the tensor peak equals max_memory_allocated; the
cuBLAS workspaces are found; at most 2% of the tensor peak is autograd_other (the rest); the one-step sweep's activation own peak grows
with depth and is tens of MB at depth 300, where the old "activation memory" read 0; the
LibTorch program gets categories, all inferred. Prints a pass/fail table.
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gpu_suite import Table, device0, load, main_process, run_case, suite_main  # noqa: E402

PROGRAM = os.path.join(HERE, "categories_program.py")
CASES = {
    "gpt": ["--model", "gpt"],
    "resnet": ["--model", "resnet"],
    "mlp": ["--model", "mlp"],
    "onestep10": ["--model", "onestep", "--depth", "10"],
    "onestep100": ["--model", "onestep", "--depth", "100"],
    "onestep300": ["--model", "onestep", "--depth", "300"],
}
OBJECT_CATEGORIES = ("parameter", "buffer", "gradient", "optimizer_state")


def run(args):
    os.makedirs(args.results, exist_ok=True)
    records = {}
    cases = [(case, [sys.executable, PROGRAM, *options]) for case, options in CASES.items()]
    libtorch = os.path.join(args.programs, "libtorch_train")
    if os.path.exists(libtorch):
        cases.append(("libtorch", [libtorch]))
    for case, program in cases:
        out = os.path.join(args.results, case)
        stats = os.path.join(args.results, case + ".stats.json")
        extra = ["--stats", stats] if program[0] == sys.executable else []
        command = [args.cumemtrace, "run", "-o", out, "--", *program, *extra]
        records[case] = run_case(command, args.results, case)
    with open(os.path.join(args.results, "categories_runs.json"), "w") as f:
        json.dump(records, f, indent=1)


def categories_of(results, case, suffix):
    summary_path = os.path.join(results, case, "summary.json")
    if not os.path.exists(summary_path):
        return None, None
    process = main_process(load(summary_path), suffix)
    device = device0(process) or {}
    return process, device.get("categories")


def figure(categories, name, where):
    entry = (categories or {}).get("by_category", {}).get(name, {})
    return (entry.get(where) or {}).get("bytes", 0)


def check_program(t, runs, results, case):
    record = runs.get(case, {})
    t.check(case, "exit status", 0, record.get("status"))
    stats_path = os.path.join(results, case + ".stats.json")
    process, categories = categories_of(results, case, "categories_program.py")
    if not t.check(case, "categories given", True, categories is not None) or \
            not os.path.exists(stats_path):
        return None
    stats = load(stats_path)
    t.check(case, "source", "objects_and_inferred", process["categories"]["source"])
    tensor_peak = categories["tensor_peak"]["bytes"]
    t.check(case, "tensor peak = max_memory_allocated", stats["max_memory_allocated"],
            tensor_peak)
    for name in OBJECT_CATEGORIES:
        t.check(case, f"{name}: own peak = the program's blocks", stats[name]["bytes"],
                figure(categories, name, "own_peak"))
        if name in ("parameter", "buffer"):
            t.check(case, f"{name}: at the tensor peak = the program's blocks",
                    stats[name]["bytes"], figure(categories, name, "at_tensor_peak"))
        # Everything the program named came from its objects, none inferred.
        t.check(case, f"{name}: from objects", figure(categories, name, "own_peak"),
                categories["by_category"].get(name, {}).get("own_peak", {}).get(
                    "objects_bytes", 0))
    # cuBLAS keeps a workspace in PyTorch's cache for each thread and stream that calls it:
    # named at exit, by what clearing them frees.
    if case != "resnet":
        t.check(case, "workspace found at exit", "> 0",
                f"{figure(categories, 'workspace', 'own_peak'):,}",
                figure(categories, "workspace", "own_peak") > 0)
    other = figure(categories, "autograd_other", "at_tensor_peak")
    t.check(case, "autograd_other at the tensor peak <= 2%", f"<= {tensor_peak * 0.02:,.0f}",
            f"{other:,}", other <= tensor_peak * 0.02)
    return categories


def check_libtorch(t, runs, results):
    if "libtorch" not in runs:
        return
    t.check("libtorch", "exit status", 0, runs["libtorch"].get("status"))
    process, categories = categories_of(results, "libtorch", "libtorch_train")
    if not t.check("libtorch", "categories given", True, categories is not None):
        return
    t.check("libtorch", "source", "inferred", process["categories"]["source"])
    objects = sum(figure(categories, n, "own_peak") and
                  categories["by_category"][n]["own_peak"]["objects_bytes"]
                  for n in categories["by_category"])
    t.check("libtorch", "no bytes from objects", 0, objects)
    t.check("libtorch", "parameters inferred", True,
            figure(categories, "parameter", "own_peak") > 0)


def check(args):
    t = Table()
    runs = load(os.path.join(args.results, "categories_runs.json"))
    for case in ("gpt", "resnet", "mlp"):
        check_program(t, runs, args.results, case)
    activation = {}
    for depth in (10, 100, 300):
        categories = check_program(t, runs, args.results, f"onestep{depth}")
        activation[depth] = figure(categories, "activation", "own_peak")
    t.check("onestep", "activation own peak grows with depth", "10 < 100 < 300",
            f"{activation[10]:,} < {activation[100]:,} < {activation[300]:,}",
            0 < activation[10] < activation[100] < activation[300])
    t.check("onestep300", "activation own peak is tens of MB", ">= 10 MB",
            f"{activation[300]:,}", activation[300] >= 10_000_000)
    check_libtorch(t, runs, args.results)
    failed = t.print()
    t.save(os.path.join(args.results, "categories_checks.json"))
    return 1 if failed else 0


def main():
    return suite_main(__doc__, run, check)


if __name__ == "__main__":
    sys.exit(main())
