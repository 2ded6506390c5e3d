#!/usr/bin/env python3
"""The GPU checks of distributed jobs (needs 2 GPUs), in two steps like gpu_suite.py:

  gpu_jobs.py run   --cumemtrace BIN --programs DIR --results DIR
  gpu_jobs.py check --results DIR

- `cumemtrace run -- torchrun --nproc_per_node=2 ddp_train.py`: every rank traced, each
  rank's allocator peak equal to its own max_memory_allocated() within 0.1%, NCCL's memory
  shown as the library's, the job view (highest rank, spread);
- two "hosts": two collectors, each running one node of a 2-node torchrun job (one GPU
  each), merged with `cumemtrace merge` into one job report.
"""
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gpu_suite import Table, load, suite_main  # noqa: E402


def torchrun(*args):
    return [sys.executable, "-m", "torch.distributed.run", *args]


def run(args):
    args.results = os.path.abspath(args.results)
    os.makedirs(args.results, exist_ok=True)
    r = args.results
    # A rerun starts clean: `cumemtrace run -o` and `merge -o` never replace outputs.
    for stale in ("ddp", "ddp_stats", "host0", "host1", "two_hosts_stats", "job.cmtrace"):
        path = os.path.join(r, stale)
        if os.path.isdir(path):
            shutil.rmtree(path)
        elif os.path.exists(path):
            os.remove(path)
    script = os.path.join(HERE, "ddp_train.py")
    records = {}
    started = time.monotonic()
    # --allocator=async in both jobs: check_ranks compares each rank's cuMemAllocAsync peak
    # with its max_memory_allocated (`run` leaves PyTorch's caching allocator by default).
    proc = subprocess.run([args.cumemtrace, "run", "-o", os.path.join(r, "ddp"),
                           "--allocator=async", "--",
                           *torchrun("--standalone", "--nproc_per_node=2", script,
                                     "--stats-dir", os.path.join(r, "ddp_stats"))],
                          capture_output=True, text=True, timeout=300)
    records["ddp"] = {"status": proc.returncode, "stderr": proc.stderr[-4000:],
                      "seconds": round(time.monotonic() - started, 1)}
    print(f"ran ddp: status {proc.returncode} in {records['ddp']['seconds']} s", flush=True)

    # Two hosts on one machine: one collector and one GPU per node, static rendezvous.
    nodes = []
    for node in (0, 1):
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(node))
        nodes.append(subprocess.Popen(
            [args.cumemtrace, "run", "-o", os.path.join(r, f"host{node}"), "--allocator=async",
             "--",
             *torchrun("--nnodes=2", f"--node_rank={node}", "--nproc_per_node=1",
                       "--master_addr=127.0.0.1", "--master_port=29533", script,
                       "--stats-dir", os.path.join(r, "two_hosts_stats"))],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outputs = [n.communicate(timeout=300) for n in nodes]
    records["two_hosts"] = {"status": [n.returncode for n in nodes],
                            "stderr": [o[1][-3000:] for o in outputs]}
    merge = subprocess.run([args.cumemtrace, "merge", "-o", os.path.join(r, "job.cmtrace"),
                            os.path.join(r, "host0"), os.path.join(r, "host1")],
                           capture_output=True, text=True)
    report = subprocess.run([args.cumemtrace, "report", "--json", os.path.join(r, "job.cmtrace")],
                            capture_output=True, text=True)
    with open(os.path.join(r, "job.summary.json"), "w") as f:
        f.write(report.stdout)
    text = subprocess.run([args.cumemtrace, "report", os.path.join(r, "job.cmtrace")],
                          capture_output=True, text=True)
    records["merge"] = {"status": merge.returncode, "stderr": merge.stderr,
                        "report_status": report.returncode, "report_text": text.stdout[-6000:]}
    print(f"ran two hosts: {records['two_hosts']['status']}, merge {merge.returncode}", flush=True)
    with open(os.path.join(r, "job_runs.json"), "w") as f:
        json.dump(records, f, indent=1)


def check_ranks(t, case, summary, stats_dir, expected_ranks):
    job = summary.get("job") or {}
    ranks = job.get("ranks", [])
    t.check(case, "ranks in the job view", expected_ranks, [r["rank"] for r in ranks])
    processes = {p["pid"]: p for p in summary["processes"]}
    for r in ranks:
        stats_path = os.path.join(stats_dir, f"rank-{r['rank']}.json")
        if not t.check(case, f"rank {r['rank']}: own statistics", True, os.path.exists(stats_path)):
            continue
        own = load(stats_path)["max_memory_allocated"]
        device = next(d for d in processes[r["pid"]]["devices"] if d["index"] == r["device"])
        t.close(case, f"rank {r['rank']}: cuMemAllocAsync peak vs max_memory_allocated", own,
                device["by_api"].get("cuMemAllocAsync", {}).get("peak_bytes", 0), 0.001)
        for phase in ("forward", "backward", "optimizer"):
            t.check(case, f"rank {r['rank']}: {phase} peak present", True,
                    r["phase_peak_bytes"].get(phase, 0) > 0)
    return job, ranks


def check(args):
    r = args.results
    runs = load(os.path.join(r, "job_runs.json"))
    t = Table()
    t.check("ddp", "exit status", 0, runs["ddp"]["status"])
    summary = load(os.path.join(r, "ddp", "summary.json"))
    job, ranks = check_ranks(t, "ddp", summary, os.path.join(r, "ddp_stats"), [0, 1])
    t.check("ddp", "launcher traced, not a rank", True,
            any(p["rank"] is None and "torch.distributed.run" in " ".join(p["command_line"])
                for p in summary["processes"]))
    t.check("ddp", "two GPUs", 2, len({x["device_uuid"] for x in ranks}))
    # (Rank 0 peaks higher than rank 1 despite its smaller batch: DDP gives rank 0 more to
    # do, and PyTorch's own max_memory_allocated() says so too.)
    peaks = {x["rank"]: x["peak_bytes"] for x in ranks}
    highest = max(peaks, key=peaks.get) if peaks else None
    t.check("ddp", "highest rank is the one with the highest peak", highest, job.get("highest_rank"))
    t.check("ddp", "imbalance = (highest - lowest) / highest",
            round((max(peaks.values()) - min(peaks.values())) / max(peaks.values()), 6) if peaks else None,
            round(job.get("imbalance", -1), 6))
    t.check("ddp", "iterations found from the program's phases (NCCL's ranges roll up)",
            "forward > backward > optimizer",
            next((p["iterations"]["range"] for p in summary["processes"] if p["rank"] == 0), None))
    t.check("ddp", "NCCL's memory shown as the library's", True,
            all(x["nccl_bytes_at_peak"] > 0 for x in ranks))
    t.check("two_hosts", "exit statuses", [0, 0], runs["two_hosts"]["status"])
    t.check("two_hosts", "merge and report", [0, 0],
            [runs["merge"]["status"], runs["merge"]["report_status"]])
    merged = load(os.path.join(r, "job.summary.json"))
    check_ranks(t, "two_hosts", merged, os.path.join(r, "two_hosts_stats"), [0, 1])
    failed = t.print()
    print("\njob report of the merged two-host trace:\n" + runs["merge"]["report_text"])
    return 1 if failed else 0


def main():
    return suite_main(__doc__, run, check)


if __name__ == "__main__":
    sys.exit(main())
