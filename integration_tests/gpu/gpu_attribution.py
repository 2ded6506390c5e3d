#!/usr/bin/env python3
"""Which module and operator each tensor was born in (`run --modules --ops`), in two steps:

  gpu_attribution.py run   --cumemtrace BIN --programs DIR --results DIR   (needs the GPU)
  gpu_attribution.py check --results DIR                                   (reads results only)

attribution_program.py runs one AdamW step of the suite's GPT-2-like model, unmodified but
for its own measuring hooks, under `cumemtrace run --modules --ops --stacks=python`, with
the per-thread buffers (the default) and again through the ring alone
(CUMEMTRACE_PER_THREAD=0); LibTorch's program runs with `--ops`.

`check` asks: the tensor peak is still max_memory_allocated by the byte; the by-module tree
accounts for every byte at the tensor peak (its rows' own bytes sum to the peak); every module
path named is one of the program's own (model.named_modules()); the module holding the most at
the peak is the one whose forward the program measured leaving the most behind, and holds at
least that (its forward's tensors are all live then; its backward's add to them); backward
blocks among the largest at the peak name a module, unless their forward operation ran outside
every module; the (up to three) largest backward blocks at the peak linked to their forward
operation name it and the program's own line; at least 90% of the backward bytes link to
their forward operation (views through their autograd node);
the LibTorch program's tensors name operators. Prints a pass/fail table.
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gpu_suite import Table, device0, load, main_process, run_case, suite_main  # noqa: E402

PROGRAM = os.path.join(HERE, "attribution_program.py")
CASES = {
    "gpt": {},
    "gpt_ring": {"CUMEMTRACE_PER_THREAD": "0"},
}


def run(args):
    os.makedirs(args.results, exist_ok=True)
    records = {}
    for case, env in CASES.items():
        out = os.path.join(args.results, case)
        stats = os.path.join(args.results, case + ".stats.json")
        command = [args.cumemtrace, "run", "-o", out, "--modules", "--ops", "--stacks=python",
                   "--", sys.executable, PROGRAM, "--stats", stats]
        records[case] = run_case(command, args.results, case, env)
    libtorch = os.path.join(args.programs, "libtorch_train")
    if os.path.exists(libtorch):
        out = os.path.join(args.results, "libtorch")
        records["libtorch"] = run_case(
            [args.cumemtrace, "run", "-o", out, "--ops", "--", libtorch,
             "--stats", os.path.join(args.results, "libtorch.stats.json")],
            args.results, "libtorch")
    with open(os.path.join(args.results, "attribution_runs.json"), "w") as f:
        json.dump(records, f, indent=1)


def device_of(results, case, suffix):
    path = os.path.join(results, case, "summary.json")
    if not os.path.exists(path):
        return None
    return device0(main_process(load(path), suffix)) or {}


def check_gpt(t, runs, results, case):
    t.check(case, "exit status", 0, runs.get(case, {}).get("status"))
    stats_path = os.path.join(results, case + ".stats.json")
    device = device_of(results, case, "attribution_program.py")
    if device is None or not os.path.exists(stats_path):
        t.check(case, "summary and stats written", True, False)
        return
    stats = load(stats_path)
    a = device.get("attribution")
    if not t.check(case, "attribution given", True, a is not None):
        return
    torch_peak = (device.get("torch") or {}).get("allocated_peak_bytes")
    t.check(case, "tensor peak = max_memory_allocated", stats["max_memory_allocated"], torch_peak)
    t.check(case, "attribution's tensor peak = max_memory_allocated",
            stats["max_memory_allocated"], a["tensor_peak"]["bytes"])
    modules = a["by_module"]
    own = sum(m["self_bytes"] for m in modules)
    t.check(case, "modules' own bytes sum to the tensor peak", a["tensor_peak"]["bytes"], own)
    known = set(stats["module_paths"])
    named = [m["module"] for m in modules if m["module"] and not m["module"].startswith("<")]
    strangers = [n for n in named if n not in known]
    t.check(case, "every module path is the program's", "[]", str(strangers[:5]),
            not strangers and len(named) > 0)
    leaves = {n: b for n, b in stats["forward_left_by_module"].items()
              if not n.startswith("<") and not any(o.startswith(n + ".") for o in known)}
    expected_top = max(leaves, key=leaves.get)
    top = max((m for m in modules if m["module"] and not m["module"].startswith("<")),
              key=lambda m: m["self_bytes"])
    t.check(case, "module holding the most at the peak", expected_top, top["module"])
    t.check(case, f"{expected_top}: bytes at the peak >= its forward's (hand count)",
            f">= {leaves[expected_top]:,}", f"{top['self_bytes']:,}",
            top["module"] == expected_top and top["self_bytes"] >= leaves[expected_top])
    backward = a["backward"]
    linked = backward["bytes"] - backward["unlinked_bytes"]
    # Linked through the forward op's allocation or, for an op that allocated nothing (a
    # view), through the autograd node the bridge says for it. Not linked: what autograd's
    # engine allocates outside any node (the loss's first gradient, sums of gradients).
    t.check(case, "backward bytes linked to their forward op", ">= 90%",
            f"{linked:,} of {backward['bytes']:,} ({linked / max(1, backward['bytes']):.1%})",
            backward["bytes"] > 0 and linked >= 0.9 * backward["bytes"])
    born_backward = [b["born"] for b in device["peak"]["largest"]
                     if b.get("born") and b["born"]["backward"]]
    # A module, or none because the forward op it is linked to ran outside every module
    # (the loss, called after the model).
    without = [b["text"] for b in born_backward
               if not b.get("module") and not (b.get("linked") and not b["module_from_forward"])]
    t.check(case, "backward blocks among the largest at the peak: module or none in forward",
            "[]", str(without[:3]), bool(born_backward) and not without)
    largest = [b for b in born_backward if b.get("linked")][:3]
    t.check(case, "largest backward blocks at the peak linked (up to 3)", ">= 1", len(largest),
            len(largest) >= 1)
    for i, born in enumerate(largest):
        line = born.get("forward_line") or ""
        t.check(case, f"backward block {i + 1} names its forward op and the program's line",
                "op, attribution_program.py or categories_program.py", born.get("text"),
                bool(born.get("forward_operator")) and
                line.split(":")[0] in ("attribution_program.py", "categories_program.py"))
    operators = [o["operator"] for o in a["by_operator"] if o["operator"]]
    t.check(case, "operators named at the peak", "> 0", len(operators), len(operators) > 0)


def check_libtorch(t, runs, results):
    if "libtorch" not in runs:
        return
    t.check("libtorch", "exit status", 0, runs["libtorch"].get("status"))
    device = device_of(results, "libtorch", "libtorch_train")
    a = (device or {}).get("attribution")
    if not t.check("libtorch", "attribution given", True, a is not None):
        return
    named = sum(o["bytes"] for o in a["by_operator"] if o["operator"])
    t.check("libtorch", "bytes at the peak with an operator >= 90%",
            f">= {a['tensor_peak']['bytes'] * 0.9:,.0f}", f"{named:,}",
            named >= a["tensor_peak"]["bytes"] * 0.9)


def check(args):
    t = Table()
    runs = load(os.path.join(args.results, "attribution_runs.json"))
    for case in CASES:
        check_gpt(t, runs, args.results, case)
    check_libtorch(t, runs, args.results)
    failed = t.print()
    t.save(os.path.join(args.results, "attribution_checks.json"))
    return 1 if failed else 0


def main():
    return suite_main(__doc__, run, check)


if __name__ == "__main__":
    sys.exit(main())
