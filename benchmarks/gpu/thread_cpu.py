#!/usr/bin/env python3
"""CPU time of every thread of a command and its child processes, by thread.

    thread_cpu.py [--interval S] -- COMMAND...

Runs COMMAND, reads /proc/<pid>/task/<tid>/stat of it and of every process below it each
interval, and prints, once it has exited, each thread's user and system seconds as last
seen (a thread that ends between two reads loses its last interval), the CPUs it may run
on, and its voluntary and involuntary context switches. It says how much CPU the tracer's
threads (cumemtrace-tx in the program, the collector process) take beside the program's
own, on a machine without a profiler, and whether a thread shares a pinned program's CPU
(the program's involuntary switches: another thread took its CPU).
"""
import argparse
import os
import subprocess
import sys
import time

TICKS = os.sysconf("SC_CLK_TCK")


def tree(root):
    """root and every process below it, by their parents in /proc/<pid>/stat."""
    parent_of = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        parent_of[int(entry)] = int(stat[stat.rindex(")") + 2:].split()[1])
    pids, todo = [], [root]
    while todo:
        pid = todo.pop()
        pids.append(pid)
        todo.extend(child for child, parent in parent_of.items() if parent == pid)
    return pids


def status_fields(path):
    """CPUs allowed and context switches (voluntary, involuntary) from a task's status."""
    fields = {}
    with open(path) as f:
        for line in f:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return (fields.get("Cpus_allowed_list", "?"), int(fields.get("voluntary_ctxt_switches", 0)),
            int(fields.get("nonvoluntary_ctxt_switches", 0)))


def read_threads(pid, seen):
    """Updates seen[(pid, tid)] = (process name, thread name, user s, system s, CPUs allowed,
    voluntary switches, involuntary switches)."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            process = f.read().strip()
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
            cpus, voluntary, involuntary = status_fields(f"/proc/{pid}/task/{tid}/status")
        except OSError:
            continue
        # The name may hold spaces and parentheses: it ends at the last ')'.
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        seen[(pid, int(tid))] = (process, name, int(fields[11]) / TICKS, int(fields[12]) / TICKS,
                                 cpus, voluntary, involuntary)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--interval", type=float, default=0.2, help="seconds between reads")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND...")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given (thread_cpu.py -- COMMAND...)")
    child = subprocess.Popen(command)
    seen = {}
    while child.poll() is None:
        for pid in tree(child.pid):
            read_threads(pid, seen)
        time.sleep(args.interval)
    print(f"{'pid':>8} {'tid':>8}  {'process':16} {'thread':16} {'user s':>8} {'system s':>8}"
          f"  {'CPUs':12} {'switches':>9} {'involuntary':>11}", file=sys.stderr)
    for (pid, tid), (process, name, user, system, cpus, voluntary, involuntary) in sorted(
            seen.items(), key=lambda item: -(item[1][2] + item[1][3])):
        if user + system > 0 or voluntary + involuntary > 0:
            print(f"{pid:>8} {tid:>8}  {process:16} {name:16} {user:8.2f} {system:8.2f}"
                  f"  {cpus:12} {voluntary:9d} {involuntary:11d}", file=sys.stderr)
    return child.returncode


if __name__ == "__main__":
    sys.exit(main())
