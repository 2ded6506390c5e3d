#!/usr/bin/env python3
"""Where the PyTorch bridge comes from (README.md "Set up", docs/cli.md), in two steps like
gpu_suite.py:

  gpu_bridge_build.py run   --cumemtrace BIN --programs DIR --results DIR   (needs the GPU)
  gpu_bridge_build.py check --results DIR                                   (reads results only)

The suite's own build names the torch; these cases build cumemtrace again from a fresh copy
of the sources (the committed tree, by `git archive`, when this is a git checkout; else the
tree without its build folders), as a newcomer would:

- fresh: configured with no torch option at all. The bridge for the torch python3 imports
  is built with it; `cumemtrace run` of a PyTorch training step (bridge_program.py, GPT-like)
  then attaches it, with an empty bridge cache (XDG_CACHE_HOME) that stays empty, and the
  tensor and segment peaks are torch.cuda.max_memory_allocated() / max_memory_reserved() by
  the byte.
- nobridge: configured with a python3 that imports no torch, so no bridge is built. With an empty
  cache, 4 traced processes started together: one builds the bridge into the cache (one
  "building" line, one library, one build.log), the others wait for it, and all 4 attach it
  with exact peaks; a later run finds it in the cache (no build line, the library unchanged)
  and attaches it too.

Prints a pass/fail table; the builds' logs and every run's output stay in --results.
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from gpu_suite import (Table, case_record, device0, load, main_process,  # noqa: E402
                       suite_main)

PROGRAM = [sys.executable, os.path.join(HERE, "bridge_program.py"), "--workload", "gpt",
           "--steps", "2"]
TOGETHER = 4
BUILDING = "building the PyTorch bridge"


def fresh_sources(dest):
    """A copy of the sources with nothing built: what a checkout gives."""
    os.makedirs(dest)
    archive = subprocess.run(["git", "-C", TOP, "archive", "--format=tar", "HEAD"],
                             capture_output=True)
    if archive.returncode == 0:
        tar = os.path.join(dest, "..", "sources.tar")
        with open(tar, "wb") as f:
            f.write(archive.stdout)
        with tarfile.open(tar) as t:
            if hasattr(tarfile, "data_filter"):
                t.extractall(dest, filter="data")
            else:
                t.extractall(dest)
        os.remove(tar)
        how = "git archive HEAD"
    else:
        shutil.rmtree(dest)
        shutil.copytree(TOP, dest, symlinks=True, ignore=shutil.ignore_patterns(
            ".git", "build", "build-*", "node_modules", "__pycache__"))
        how = "copy of the tree"
    # Debian's protobuf source (tools/fetch-protobuf-source.sh), which a checkout fetches.
    if os.path.isdir(os.path.join(TOP, "third_party", "protobuf")):
        shutil.copytree(os.path.join(TOP, "third_party", "protobuf"),
                        os.path.join(dest, "third_party", "protobuf"), dirs_exist_ok=True)
    return how


def build(sources, build_dir, options, log_path):
    """Configures and builds; returns (status, configure output)."""
    launcher = ["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"] if shutil.which("ccache") else []
    with open(log_path, "w") as log:
        configure = subprocess.run(
            ["cmake", "-S", sources, "-B", build_dir, "-G", "Ninja",
             "-DCMAKE_BUILD_TYPE=RelWithDebInfo", "-DCUMEMTRACE_BUILD_TESTS=OFF",
             "-DCUMEMTRACE_BUILD_BENCHMARKS=OFF", *launcher, *options],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        log.write(configure.stdout)
        if configure.returncode != 0:
            return configure.returncode, configure.stdout
        built = subprocess.run(["cmake", "--build", build_dir], stdout=log,
                               stderr=subprocess.STDOUT)
        return built.returncode, configure.stdout


def build_case(sources, results, name, options):
    """Builds the sources with `options` into RESULTS/build-NAME, and says so; returns that
    folder and the build's record (status, configure's lines about the bridge, the bridges
    built)."""
    build_dir = os.path.join(results, "build-" + name)
    status, configured = build(sources, build_dir, options,
                               os.path.join(results, f"build-{name}.log"))
    record = {
        "status": status, "configure": [line for line in configured.splitlines()
                                        if "PyTorch bridge" in line],
        "bridges": sorted(os.path.basename(p) for p in glob.glob(os.path.join(
            build_dir, "lib", "cumemtrace", "libcumemtrace-torch-bridge-*.so")))}
    print(f"built {name}: status {status}", flush=True)
    return build_dir, record


def traced(cumemtrace, results, case, cache):
    """The command and environment of one traced run of PROGRAM with the bridge cache at
    `cache`, PyTorch's allocator as the program has it (no PYTORCH_CUDA_ALLOC_CONF)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTORCH_CUDA_ALLOC_CONF", "CUMEMTRACE_TORCH_BRIDGE",
                        "CUMEMTRACE_TORCH_BRIDGE_DIR")}
    env["XDG_CACHE_HOME"] = cache
    command = [cumemtrace, "run", "-o", os.path.join(results, case), "--", *PROGRAM,
               "--stats", os.path.join(results, case + ".stats.json")]
    return command, env


def finish(proc, command, started, results, case):
    _, stderr = proc.communicate(timeout=900)
    return case_record(command, proc.returncode, stderr, started, results, case)


def run_one(cumemtrace, results, case, cache):
    command, env = traced(cumemtrace, results, case, cache)
    started = time.monotonic()
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return finish(proc, command, started, results, case)


def cache_state(cache):
    libraries = sorted(glob.glob(os.path.join(cache, "cumemtrace", "bridges", "*",
                                              "libcumemtrace-torch-bridge-*.so")))
    logs = glob.glob(os.path.join(cache, "cumemtrace", "bridges", "*", "build.log"))
    return {"libraries": libraries, "build_logs": len(logs),
            "mtimes": [os.stat(p).st_mtime_ns for p in libraries]}


def run(args):
    results = os.path.abspath(args.results)
    shutil.rmtree(results, ignore_errors=True)
    os.makedirs(results)
    records = {}
    sources = os.path.join(results, "sources")
    records["sources"] = fresh_sources(sources)

    # fresh: no torch option.
    fresh_build, records["fresh_build"] = build_case(sources, results, "fresh", [])
    if records["fresh_build"]["status"] == 0:
        cache = os.path.join(results, "cache-fresh")
        os.makedirs(cache)
        records["fresh"] = run_one(os.path.join(fresh_build, "bin", "cumemtrace"), results,
                                   "fresh", cache)
        records["fresh"]["cache_after"] = cache_state(cache)

    # nobridge: a python3 that imports no torch at configure time, so no bridge beside the
    # tracer. (Naming it ...-NOTFOUND would not do: find_program searches again then.)
    no_torch_python = os.path.join(results, "python3-without-torch")
    with open(no_torch_python, "w") as f:
        f.write("#!/bin/sh\nexit 1\n")
    os.chmod(no_torch_python, 0o755)
    nobridge_build, records["nobridge_build"] = build_case(
        sources, results, "nobridge", [f"-DCUMEMTRACE_PYTHON3={no_torch_python}"])
    if records["nobridge_build"]["status"] == 0:
        cumemtrace = os.path.join(nobridge_build, "bin", "cumemtrace")
        cache = os.path.join(results, "cache-nobridge")
        os.makedirs(cache)
        # Started together: each `run` finds no bridge and goes for the cache at once.
        started = time.monotonic()
        procs = []
        for i in range(TOGETHER):
            case = f"together{i}"
            command, env = traced(cumemtrace, results, case, cache)
            procs.append((case, command, subprocess.Popen(
                command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)))
        for case, command, proc in procs:
            records[case] = finish(proc, command, started, results, case)
        records["cache_after_together"] = cache_state(cache)
        records["again"] = run_one(cumemtrace, results, "again", cache)
        records["cache_after_again"] = cache_state(cache)
    with open(os.path.join(results, "bridge_build_runs.json"), "w") as f:
        json.dump(records, f, indent=1)


def check_run(t, results, record, case):
    """Exit status, the bridge attached, and the peaks exact."""
    t.check(case, "exit status", 0, record.get("status"))
    summary_path = os.path.join(results, case, "summary.json")
    stats_path = os.path.join(results, case + ".stats.json")
    if not t.check(case, "summary and program statistics written", True,
                   os.path.exists(summary_path) and os.path.exists(stats_path)):
        return
    stats = load(stats_path)
    process = main_process(load(summary_path), "bridge_program.py")
    t.check(case, "bridge attached", True, process.get("torch_bridge", {}).get("attached"))
    torch_layers = (device0(process) or {}).get("torch", {})
    t.check(case, "tensor peak = max_memory_allocated", stats["max_memory_allocated"],
            torch_layers.get("allocated_peak_bytes"))
    t.check(case, "segment peak = max_memory_reserved", stats["max_memory_reserved"],
            torch_layers.get("reserved_peak_bytes"))


def building_lines(record):
    return [line for line in record.get("stderr", "").splitlines() if BUILDING in line]


def check(args):
    runs = load(os.path.join(args.results, "bridge_build_runs.json"))
    t = Table()
    t.check("sources", "fresh sources (info)", "any", runs.get("sources"), True)

    fresh_build = runs.get("fresh_build", {})
    t.check("fresh", "build with no torch option", 0, fresh_build.get("status"))
    t.check("fresh", "configure names the torch python3 imports", True,
            any("for the torch python3 imports" in line
                for line in fresh_build.get("configure", [])))
    t.check("fresh", "bridges built beside the tracer", 1, len(fresh_build.get("bridges", [])))
    if "fresh" in runs:
        check_run(t, args.results, runs["fresh"], "fresh")
        t.check("fresh", "no bridge built at run time", [], building_lines(runs["fresh"]))
        t.check("fresh", "bridge cache left empty", [],
                runs["fresh"].get("cache_after", {}).get("libraries"))

    nobridge_build = runs.get("nobridge_build", {})
    t.check("nobridge", "build with a python3 that has no torch", 0, nobridge_build.get("status"))
    t.check("nobridge", "configure builds no bridge", True,
            any("none built now" in line for line in nobridge_build.get("configure", [])))
    t.check("nobridge", "bridges beside the tracer", [], nobridge_build.get("bridges"))
    together = [f"together{i}" for i in range(TOGETHER)]
    if all(case in runs for case in together):
        builders = [case for case in together if building_lines(runs[case])]
        t.check("together", f"processes that built the bridge (of {TOGETHER})", 1, len(builders))
        # The others, started with it, waited for that build rather than making their own.
        waited = [case for case in together if any(
            "waiting for another cumemtrace" in line
            for line in runs[case]["stderr"].splitlines())]
        t.check("together", "processes that waited for it", TOGETHER - 1, len(waited))
        cache = runs.get("cache_after_together", {})
        t.check("together", "bridge libraries in the cache", 1, len(cache.get("libraries", [])))
        t.check("together", "builds (build.log) in the cache", 1, cache.get("build_logs"))
        for case in together:
            check_run(t, args.results, runs[case], case)
    else:
        t.check("together", "runs", TOGETHER, sum(1 for case in together if case in runs), False)
    if "again" in runs:
        check_run(t, args.results, runs["again"], "again")
        t.check("again", "no build: the cache's bridge", [], building_lines(runs["again"]))
        t.check("again", "the cached library unchanged",
                runs.get("cache_after_together", {}).get("mtimes"),
                runs.get("cache_after_again", {}).get("mtimes"))
    failed = t.print()
    t.save(os.path.join(args.results, "bridge_build_suite.json"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(suite_main(__doc__, run, check))
