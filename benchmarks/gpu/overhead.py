#!/usr/bin/env python3
"""Tracing overhead on the GPU machine: the workloads of workloads.py and the LibTorch
training program, untraced, under cumemtrace (the default, memory + NVTX only, kernels
counted at their launch or recorded, stacks) and under PyTorch's own memory recorders, one
process per run, configurations interleaved round by round so that drift of the machine
falls on all of them alike.

  overhead.py --cumemtrace BIN --libtorch-train BIN [--rounds 3] [--out results.json]
              [--workloads mlp,launch,alloc,libtorch] [--configs 'NAME|NAME...']
              [--baseline-cumemtrace BIN] [--tracker-probe LIB] [--seconds N]
              [--program-rounds N]
  overhead.py --pool RESULTS.json... [--configs 'NAME|NAME...'] [--out pooled.json]

--baseline-cumemtrace adds "baseline: cumemtrace" and "baseline: cumemtrace --no-kernels",
the same runs with another build (the one before a change), interleaved with the rest, so
that the cost of a change is measured in one run (mux_overhead.sh: the CUPTI multiplexer).

"cumemtrace (socket only)" and "cumemtrace --no-kernels (socket only)" are the same build
with CUMEMTRACE_SHARED_RING=0: the tracer keeps its ring in private memory and the collector
gets records through the socket alone, so the difference to "cumemtrace" is what the shared
ring (records kept when the program dies) costs.

Prints, per workload, the median over processes of each configuration's per-process median,
and its ratio to the untraced run (native allocator: what the program does by itself) and,
for --allocator=async, to the untraced run with the async allocator too. Processes can
spread more than the effect, so with more than one round three more columns tell drift from
noise: "paired", the median
over rounds of each round's ratio to the untraced process of the same round (processes next
to each other in time), "best", the ratio of the lowest processes (noise only ever adds), and
"within", the median spread of the rounds inside one process, (max - min) / median. With
them, "paired mean": the geometric mean of the rounds' paired ratios and its 95% interval,
which says whether the rounds resolve a target (1.03x) at all.

--pool runs nothing: it reads the --out files of earlier runs and prints their rounds
together, each round still paired with its own untraced process. Pool the configurations
that every file has (--configs, and --workloads to keep some); it refuses what would pair a
round with another run's untraced process, and a file given twice.

--slow-above N (with --pool) leaves out every round in which a process of any configuration
measured more than N (in the workload's own unit, so give one workload): the GPU machines'
virtual CPUs sometimes run a whole process in a slow mode 40-60% above the others, which no
interval over the rounds absorbs. The summary says how many rounds it left out.

--program-rounds N makes each workloads.py process time N rounds of its workloads (its own
--rounds, 5 unless given). Where processes differ more than the rounds inside one process do
(the EP workloads, whose figure is the lowest decile of 60 settling iterations per step),
fewer rounds per process leave time for more processes in the same minutes, and it is the
interval over processes that resolves a target.
"""
import argparse
import json
from math import exp, isnan, log, nan, sqrt
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ASYNC = {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}
SOCKET_ONLY = {"CUMEMTRACE_SHARED_RING": "0"}


def cpu_plan():
    """The CPU the programs' main thread runs alone on, and the CPUs for everything else
    (collector, tracer thread, the program's other threads): neither the chosen CPU nor its
    hyperthread sibling. Between-process noise on the GPU machine was bimodal (up to 2x on
    the allocation loop) without it."""
    cpus = sorted(os.sched_getaffinity(0))
    main = cpus[len(cpus) // 2]
    siblings = {main}
    path = f"/sys/devices/system/cpu/cpu{main}/topology/thread_siblings_list"
    if os.path.exists(path):
        for part in open(path).read().strip().split(","):
            lo, _, hi = part.partition("-")
            siblings.update(range(int(lo), int(hi or lo) + 1))
    return main, ",".join(str(c) for c in cpus if c not in siblings)


MAIN_CPU, OTHER_CPUS = cpu_plan()


def baseline_configs(baseline, scratch, argv):
    if not baseline:
        return {}
    run = lambda name, *flags: [baseline, "run", "-o", os.path.join(scratch, name), "--quiet",
                                *flags, "--", *argv]
    return {"baseline: cumemtrace --no-kernels": (run("base-nokernels", "--no-kernels"), {}),
            "baseline: cumemtrace": (run("base-default"), {})}


def tracker_probe_configs(probe, workloads):
    """The untraced program with tracker_cost_probe.cc's tracker attached, one configuration
    per share of the bridge's work (tracker_costs.sh builds the probe)."""
    if not probe:
        return {}
    return {f"untraced, tracker probe: {mode}": (workloads + ["--tracker-probe", f"{probe}:{mode}"],
                                                 {})
            for mode in ("noop", "counters", "core", "core+clock")}


def python_configs(cumemtrace, scratch, only, baseline=None, probe=None, program_rounds=None):
    workloads = [sys.executable, os.path.join(HERE, "workloads.py"), "--pin", str(MAIN_CPU),
                 "--only", only]
    if program_rounds is not None:
        workloads += ["--rounds", str(program_rounds)]
    run = lambda name, *flags: [cumemtrace, "run", "-o", os.path.join(scratch, name), "--quiet",
                                *flags, "--", *workloads]
    return {
        # The base of every ratio: the program with its own (native caching) allocator.
        "untraced": (workloads, {}),
        "untraced, async allocator": (workloads, ASYNC),
        # The default: the program's allocator untouched, tensors through the PyTorch bridge,
        # no launch watched while the bridge sees the tensors.
        "cumemtrace": (run("default"), {}),
        "cumemtrace --kernels=launches": (run("launches", "--kernels=launches"), {}),
        "cumemtrace --no-kernels": (run("nokernels", "--no-kernels"), {}),
        # What naming parameters, gradients and optimizer state from the program's objects
        # costs: the default without it (target: the default at most 0.5% above this).
        "cumemtrace --no-categories": (run("nocategories", "--no-categories"), {}),
        # The tensor events through the shared ring alone, not the threads' own buffers.
        "cumemtrace (ring only)": (run("ringonly"), {"CUMEMTRACE_PER_THREAD": "0"}),
        # Each tensor's module (target <= 1.05x) and operator (target <= 1.15x) on the
        # GPT-2-like and ResNet-18-like rows.
        "cumemtrace --modules": (run("modules", "--modules"), {}),
        "cumemtrace --ops": (run("ops", "--ops"), {}),
        "cumemtrace --modules --ops": (run("modules-ops", "--modules", "--ops"), {}),
        # The bridge on and off in alternate windows of the clock inside each process
        # (CUMEMTRACE_BENCH_ALTERNATE_MS, alternating_windows.py): on/off figures of the
        # settling iterations, or of the steps elsewhere, which the CPU's changes of speed
        # fall on alike. Windows of several spans: 50 ms for EP at depth 50 and for the
        # launch-bound MLP and ResNet (7-8 ms steps), 150 ms at depth 200.
        "cumemtrace, 50 ms windows": (run("windows50"), {"CUMEMTRACE_BENCH_ALTERNATE_MS": "50"}),
        "cumemtrace, 150 ms windows": (run("windows150"),
                                       {"CUMEMTRACE_BENCH_ALTERNATE_MS": "150"}),
        "cumemtrace (ring only), 50 ms windows": (
            run("ringwindows50"), {"CUMEMTRACE_BENCH_ALTERNATE_MS": "50",
                                   "CUMEMTRACE_PER_THREAD": "0"}),
        "cumemtrace --stacks=python, 50 ms windows": (
            run("stackswindows50", "--stacks=python"), {"CUMEMTRACE_BENCH_ALTERNATE_MS": "50"}),
        # What the shared ring costs: the same, records through the socket only.
        "cumemtrace (socket only)": (run("socket"), SOCKET_ONLY),
        "cumemtrace --no-kernels (socket only)":
            (run("socket-nokernels", "--no-kernels"), SOCKET_ONLY),
        # The same with a ring of 2 or 4 MiB instead of 32: whether the ring's cache misses count.
        "cumemtrace (ring 2 MiB)": (run("ring2m"), {"CUMEMTRACE_QUEUE_EVENTS": "16384"}),
        "cumemtrace (ring 4 MiB)": (run("ring4m"), {"CUMEMTRACE_QUEUE_EVENTS": "32768"}),
        # What the bridge itself costs: segments only, as without a bridge.
        "cumemtrace --no-kernels, bridge off":
            (run("nobridge", "--no-kernels"), {"CUMEMTRACE_TORCH_BRIDGE": "0"}),
        "cumemtrace --allocator=async": (run("async", "--allocator=async"), {}),
        # Where each allocation was made (target: <= 1.10x on ep and resnet, next to torch's
        # memory history, which records Python stacks too).
        "cumemtrace --stacks=python": (run("stacks", "--stacks=python"), {}),
        "cumemtrace --stacks=python --no-kernels":
            (run("stacks-nokernels", "--stacks=python", "--no-kernels"), {}),
        "cumemtrace --stacks=all": (run("stacks-all", "--stacks=all"), {}),
        "torch memory history (python stacks)": (workloads + ["--recorder", "history"], {}),
        "torch.profiler profile_memory": (workloads + ["--recorder", "profiler"], {}),
        **baseline_configs(baseline, scratch, workloads),
        **tracker_probe_configs(probe, workloads),
    }


def libtorch_configs(cumemtrace, program, scratch, baseline=None):
    argv = [program, "--steps", "40", "--timing", "-", "--pin", str(MAIN_CPU)]
    run = lambda name, *flags: [cumemtrace, "run", "-o", os.path.join(scratch, name), "--quiet",
                                *flags, "--", *argv]
    return {
        "untraced": (argv, {}),
        "untraced, async allocator": (argv, ASYNC),
        "cumemtrace": (run("lt-default"), {}),
        "cumemtrace --kernels=launches": (run("lt-launches", "--kernels=launches"), {}),
        "cumemtrace --no-kernels": (run("lt-nokernels", "--no-kernels"), {}),
        "cumemtrace (socket only)": (run("lt-socket"), SOCKET_ONLY),
        "cumemtrace --no-kernels (socket only)":
            (run("lt-socket-nokernels", "--no-kernels"), SOCKET_ONLY),
        "cumemtrace --no-kernels, bridge off":
            (run("lt-nobridge", "--no-kernels"), {"CUMEMTRACE_TORCH_BRIDGE": "0"}),
        "cumemtrace --allocator=async": (run("lt-async", "--allocator=async"), {}),
        # A C++ program: no Python stack, so --stacks=python costs the mode check only.
        "cumemtrace --stacks=python": (run("lt-stacks", "--stacks=python"), {}),
        "cumemtrace --stacks=native": (run("lt-stacks-native", "--stacks=native"), {}),
        # Diagnostic: what is left with no per-call callbacks at all (no memory then).
        "cumemtrace --no-kernels (API callbacks off)":
            (run("lt-nocallbacks", "--no-kernels"), {"CUMEMTRACE_API_CALLBACKS": "0"}),
        **baseline_configs(baseline, scratch, argv),
    }


def run_once(argv, env_extra, scratch):
    for name in os.listdir(scratch):
        shutil.rmtree(os.path.join(scratch, name), ignore_errors=True)
    env = dict(os.environ, **env_extra)
    proc = subprocess.run(["taskset", "-c", OTHER_CPUS, *argv], capture_output=True, text=True,
                          env=env, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"{argv} exited {proc.returncode}: {proc.stderr[-2000:]}")
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"{argv}: no JSON line in {proc.stdout[-500:]}")


def paired_ratios(samples, workload, name, figure=None):
    """Each round's ratio to the untraced process of the same round (processes next to each
    other in time). `figure` (a key of `name`'s, e.g. WORKLOAD@off) takes the place of the
    workload's own figure on the traced side; the untraced side stays the workload's."""
    base = samples.get((workload, "untraced"), [])
    return [value / b for value, b in zip(samples.get((figure or workload, name), []), base) if b]


def paired_ratio(samples, workload, name):
    """The median over rounds of the paired ratios."""
    ratios = paired_ratios(samples, workload, name)
    return statistics.median(ratios) if ratios else nan


# Student's t at 97.5% for 1..30 degrees of freedom; beyond, 2.0 up to 60 and then the
# normal's 1.96 (a little wide, never narrow).
T975 = [12.71, 4.30, 3.18, 2.78, 2.57, 2.45, 2.36, 2.31, 2.26, 2.23, 2.20, 2.18, 2.16, 2.14,
        2.13, 2.12, 2.11, 2.10, 2.09, 2.09, 2.08, 2.07, 2.07, 2.06, 2.06, 2.06, 2.05, 2.05,
        2.05, 2.04]


def paired_interval(samples, workload, name, figure=None):
    """The geometric mean of the rounds' paired ratios and its 95% interval (t over the
    logarithms): how far the rounds pin the ratio down, which the median does not say.
    `figure` as for paired_ratios."""
    return mean_interval(paired_ratios(samples, workload, name, figure))


def window_ratios(samples, workload, name, figure=""):
    """Each process's ratio of its iterations in the windows with the recording on to those
    with it off (`figure` "": the lowest decile, "@median": the median)."""
    on = samples.get((f"{workload}@on{figure}", name), [])
    off = samples.get((f"{workload}@off{figure}", name), [])
    return [a / b for a, b in zip(on, off) if b]


def mean_interval(ratios):
    """The geometric mean of ratios and its 95% interval (t over the logarithms)."""
    logs = [log(ratio) for ratio in ratios if ratio > 0]
    if len(logs) < 2:
        return nan, nan, nan
    mean = statistics.fmean(logs)
    freedom = len(logs) - 1
    t = T975[freedom - 1] if freedom <= len(T975) else 2.0 if freedom <= 60 else 1.96
    half = t * statistics.stdev(logs) / sqrt(len(logs))
    return exp(mean), exp(mean - half), exp(mean + half)


def drop_slow_rounds(samples, wanted, limit):
    """Removes, for each workload in `wanted`, every round in which some configuration's
    process measured more than `limit`, from all of that workload's figures alike (so the
    rounds left stay paired). A figure with other rounds than the workload's own (pooled
    from files of which only some had it) cannot say which of its rounds were slow, and goes.
    Returns {workload: (rounds left out, rounds before)}."""
    dropped = {}
    for workload in wanted:
        figures = [v for (w, _), v in samples.items() if w == workload]
        if not figures:
            continue
        rounds = max(len(v) for v in figures)
        slow = {i for v in figures for i, value in enumerate(v) if value > limit}
        dropped[workload] = (len(slow), rounds)
        for (w, config), v in list(samples.items()):
            if w.split("@")[0] != workload:
                continue
            if len(v) != rounds:
                del samples[(w, config)]
            else:
                samples[(w, config)] = [value for i, value in enumerate(v) if i not in slow]
    return dropped


def summarize(samples, wanted, out, units=None):
    """Prints each workload's table and writes the results (with every sample) to `out`.
    `units` (workload -> unit) comes with pooled files, which may be read without torch."""
    sys.path.insert(0, HERE)
    try:
        from workloads import TITLES as titles, UNITS  # noqa: E402
    except ImportError:  # --pool where torch is not installed: the workloads' own names
        titles, UNITS = {}, {}
    figure_units = {"median": "{time}, median", "step": "ms/step",
                    "on": "{time}, lowest decile, bridge on",
                    "off": "{time}, lowest decile, bridge off",
                    "on@median": "{time}, median, bridge on",
                    "off@median": "{time}, median, bridge off",
                    "on@count": "{spans}", "off@count": "{spans}", "cut@count": "{spans}"}

    def unit(w):
        """A figure's unit: the settling workloads' figures are per iteration, the others'
        per step (or in the workload's own unit)."""
        if (units or {}).get(w):
            return units[w]
        workload, _, figure = w.partition("@")
        settling = workload.endswith("-settle")
        if not figure:
            return UNITS.get(workload, "ms/step")
        return figure_units[figure].format(
            time="ms/settling iteration" if settling else UNITS.get(workload, "ms/step"),
            spans="iterations" if settling else "steps")
    results = []
    # The settling workloads' other figures too; rows without samples print nothing.
    for workload in [w + figure for w in wanted for figure in ("", "@median", "@step")]:
        rows = {name: statistics.median(v) for (w, name), v in samples.items() if w == workload}
        if not rows:
            continue
        base = rows.get("untraced")
        base_async = rows.get("untraced, async allocator")
        title = titles.get(workload.split("@")[0], workload)
        rounds = max(len(v) for (w, _), v in samples.items() if w == workload)
        print(f"\n{title} ({unit(workload)}, median of {rounds} processes)")
        for name, value in rows.items():
            ratio = value / base if base else nan
            extra = ""
            if name == "cumemtrace --allocator=async" and base_async:
                extra = f"   vs untraced async: {value / base_async:.3f}x"
            paired = paired_ratio(samples, workload, name)
            within = samples.get((workload.split("@")[0] + "@spread", name))
            within = f"{statistics.median(within):.1%}" if within else "-"
            base_samples = samples.get((workload, "untraced"))
            best = min(samples[(workload, name)]) / min(base_samples) if base_samples else nan
            mean, low, high = paired_interval(samples, workload, name)
            if len(samples[(workload, name)]) > 1:
                extra += f"   paired {paired:.3f}x, best {best:.3f}x, within {within}"
                if name != "untraced" and not isnan(mean):
                    extra += f", paired mean {mean:.3f}x (95%: {low:.3f}-{high:.3f})"
            print(f"  {name:40s} {value:9.3f}   {ratio:.3f}x{extra}")
            results.append({"workload": workload, "config": name, "median": value,
                            "unit": unit(workload), "ratio_to_untraced": ratio,
                            "ratio_to_untraced_async": value / base_async if base_async else None,
                            "paired_ratio_to_untraced": paired,
                            "paired_mean_ratio_to_untraced": mean,
                            "paired_mean_95_interval": [low, high],
                            "samples": samples[(workload, name)],
                            "spread_samples": samples.get((workload.split("@")[0] + "@spread",
                                                           name), [])})
    # Inside one process: the recording on against off, each process its own pair.
    for workload in wanted:
        names = [name for (w, name) in samples if w == f"{workload}@on"]
        if not names:
            continue
        title = titles.get(workload, workload)
        spans = "settling iterations" if workload.endswith("-settle") else "steps"
        print(f"\n{title}, inside each process: the {spans} with the bridge on against those "
              f"with it off (CUMEMTRACE_BENCH_ALTERNATE_MS)")
        for name in names:
            for figure, what in (("", "lowest decile"), ("@median", "median")):
                ratios = window_ratios(samples, workload, name, figure)
                mean, low, high = mean_interval(ratios)
                interval = f", mean {mean:.3f}x (95%: {low:.3f}-{high:.3f})" if ratios[1:] else ""
                listed = ", ".join(f"{r:.3f}" for r in ratios)
                print(f"  {name:40s} {what:13s} {len(ratios)} processes: {listed}{interval}")
            # With untraced processes in the same rounds, each window against them splits the
            # whole: the off windows carry everything but the bridge's own work (torch's
            # tracker, the sender, CUPTI, NVTX), the on windows all of it.
            for state, what in (("off", "off windows"), ("on", "on windows")):
                mean, low, high = paired_interval(samples, workload, name, f"{workload}@{state}")
                if not isnan(mean):
                    print(f"  {name:40s} {what} against untraced, lowest decile, paired mean "
                          f"{mean:.3f}x (95%: {low:.3f}-{high:.3f})")
            for state in ("on", "off", "on@median", "off@median", "on@count", "off@count",
                          "cut@count"):
                key = f"{workload}@{state}"
                if (key, name) in samples:
                    results.append({"workload": key, "config": name, "unit": unit(key),
                                    "samples": samples[(key, name)]})
    if out:
        with open(out, "w") as f:
            json.dump(results, f, indent=1)


def pooled_samples(paths, keep, workloads):
    """The samples of earlier runs' --out files, one after the other, of the configurations
    in `keep` and the workloads in `workloads` (all where None): a round of each file stays
    paired with the untraced process of the same round. Exits where that pairing would not
    hold: a file given twice, a workload whose configurations have different numbers of
    rounds, units that differ."""
    if len({os.path.realpath(path) for path in paths}) != len(paths):
        sys.exit("--pool: a file is given twice: its rounds would count twice")
    samples, wanted, units, spreads_missing = {}, [], {}, set()
    for path in paths:
        with open(path) as f:
            rows = [row for row in json.load(f)
                    if (keep is None or row["config"] in keep)
                    and (workloads is None or row["workload"].split("@")[0] in workloads)]
        for row in rows:
            workload, config = row["workload"], row["config"]
            base = workload.split("@")[0]
            if units.setdefault(workload, row["unit"]) != row["unit"]:
                sys.exit(f"--pool: {path} measures {workload} in {row['unit']}, an earlier "
                         f"file in {units[workload]}")
            if base == workload:
                if workload not in wanted:
                    wanted.append(workload)
                # "within" only where every file kept its spreads (older files did not).
                if len(row.get("spread_samples", [])) != len(row["samples"]):
                    spreads_missing.add(base)
                samples.setdefault((base + "@spread", config), []).extend(
                    row.get("spread_samples", []))
            samples.setdefault((workload, config), []).extend(row["samples"])
        # After every file, each configuration of a workload must have as many rounds as the
        # others: a configuration that an earlier file lacks would pair with its rounds.
        for workload in {row["workload"] for row in rows}:
            counts = {len(v) for (w, _), v in samples.items() if w == workload}
            if len(counts) > 1:
                sys.exit(f"--pool: after {path}, the configurations of {workload} have "
                         f"different numbers of rounds ({sorted(counts)}): pool only those "
                         f"that every file has (--configs)")
    for base in spreads_missing:
        for key in [k for k in samples if k[0] == base + "@spread"]:
            del samples[key]
    return samples, wanted, units


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cumemtrace")
    parser.add_argument("--libtorch-train")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out")
    parser.add_argument("--workloads",
                        help="comma list of workloads.py's workloads and libtorch (default: "
                             "ep50,ep200,launch,resnet,gpt,libtorch, the rows of the overhead "
                             "targets)")
    parser.add_argument("--configs", help="'|'-separated configuration names to run (default all)")
    parser.add_argument("--baseline-cumemtrace", help="another build's cumemtrace, run beside")
    parser.add_argument("--tracker-probe",
                        help="tracker_cost_probe.cc's library: adds its configurations")
    parser.add_argument("--seconds", type=float,
                        help="start no round that would end past this many seconds at the "
                             "pace of the rounds so far, and report the rounds done (for a "
                             "command with a time limit)")
    parser.add_argument("--program-rounds", type=int, metavar="N",
                        help="rounds each workloads.py process times (its --rounds; default 5)")
    parser.add_argument("--pool", nargs="+", metavar="JSON",
                        help="run nothing: summarize the rounds of earlier runs' --out files "
                             "together (with --configs and --workloads, only those)")
    parser.add_argument("--slow-above", type=float, metavar="N",
                        help="with --pool: leave out the rounds in which any process measured "
                             "more than N (the workload's unit; one workload)")
    args = parser.parse_args()
    keep = set(args.configs.split("|")) if args.configs else None
    if args.pool:
        if (args.cumemtrace or args.libtorch_train or args.seconds
                or args.program_rounds is not None):
            parser.error("--pool runs nothing: --cumemtrace, --libtorch-train, --seconds and "
                         "--program-rounds do not apply")
        workloads = set(args.workloads.split(",")) if args.workloads else None
        samples, wanted, units = pooled_samples(args.pool, keep, workloads)
        if args.slow_above is not None:
            for workload, (left_out, rounds) in drop_slow_rounds(samples, wanted,
                                                                 args.slow_above).items():
                print(f"{workload}: left out {left_out} of {rounds} rounds with a process "
                      f"above {args.slow_above:g}")
        summarize(samples, wanted, args.out, units)
        return
    if args.slow_above is not None:
        parser.error("--slow-above applies to --pool: a run's --out file keeps every round")
    if args.program_rounds is not None and args.program_rounds < 1:
        parser.error("--program-rounds: at least 1")
    if not args.cumemtrace or not args.libtorch_train:
        parser.error("--cumemtrace and --libtorch-train are needed to run (all but --pool)")
    started = time.monotonic()
    scratch = tempfile.mkdtemp(prefix="cmt-overhead-")
    samples = {}  # (workload, config) -> [per-process figure]
    wanted = (args.workloads or "ep50,ep200,launch,resnet,gpt,libtorch").split(",")
    python_only = ",".join(w for w in wanted if w != "libtorch")
    suites = []
    if python_only:
        suites.append(python_configs(args.cumemtrace, scratch, python_only,
                                     args.baseline_cumemtrace, args.tracker_probe,
                                     args.program_rounds))
    if "libtorch" in wanted:
        suites.append(libtorch_configs(args.cumemtrace, args.libtorch_train, scratch,
                                       args.baseline_cumemtrace))
    if keep:
        suites = [{k: v for k, v in s.items() if k in keep} for s in suites]
    print(f"main thread on CPU {MAIN_CPU}, everything else on {OTHER_CPUS}", flush=True)
    # One unrecorded round first: on the GPU machine the first processes after a pause ran
    # up to 40% slower in every configuration.
    for configs in suites:
        for name, (argv, env) in configs.items():
            run_once(argv, env, scratch)
    rounds_done = 0
    for round_index in range(args.rounds):
        elapsed = time.monotonic() - started
        if args.seconds and rounds_done and elapsed * (rounds_done + 1) / rounds_done > args.seconds:
            print(f"stopped after {rounds_done} rounds: another would end past {args.seconds:g} s",
                  flush=True)
            break
        for configs in suites:
            names = list(configs)
            # Rotate the order every round: no configuration always runs first or last.
            shift = round_index % len(names)
            for name in names[shift:] + names[:shift]:
                argv, env = configs[name]
                figures = run_once(argv, env, scratch)
                for workload, value in figures.items():
                    samples.setdefault((workload, name), []).append(value)
                print(f"round {round_index + 1}: {name}: {figures}", flush=True)
        rounds_done += 1
    shutil.rmtree(scratch, ignore_errors=True)

    summarize(samples, wanted, args.out)


if __name__ == "__main__":
    main()
