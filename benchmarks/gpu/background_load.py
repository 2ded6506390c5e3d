#!/usr/bin/env python3
"""Whether other CPUs' activity slows a program pinned to its own CPU.

    background_load.py [--rounds 3] [--seconds 10] [--cpu 8]

A traced program has company: the tracer's sender thread and the collector process run on
other CPUs. If that company lowered the speed of the program's CPU (a shared frequency or
power budget), the tracer would cost the program time that no measure inside the program
switches. This times a fixed Python loop (100,000 additions) over and over on one pinned
CPU, alone and beside loads on other CPUs: one CPU busy 10% of the time (1 ms every 10 ms,
about what the collector takes) or all the time, and the same on eight CPUs. The
conditions run in a fixed order each round; each line gives the loop's time in ms (lowest,
10th percentile, median, 90th percentile) for one condition in one round.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

# One load: spins `on` seconds of every `period` (its CPU is set by the parent), and ends
# with its parent.
LOAD = r"""
import os, sys, time
on, period = float(sys.argv[1]), float(sys.argv[2])
parent = os.getppid()
while os.getppid() == parent:
    start = time.perf_counter()
    while time.perf_counter() - start < on:
        pass
    if period > on:
        time.sleep(period - on)
"""


def loop_times_ms(seconds):
    times = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        start = time.perf_counter()
        total = 0
        for i in range(100_000):
            total += i
        times.append((time.perf_counter() - start) * 1e3)
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--cpu", type=int, default=8, help="the program's CPU")
    args = parser.parse_args()
    others = sorted(os.sched_getaffinity(0) - {args.cpu})
    if len(others) < 8:
        sys.exit(f"background_load.py: needs 8 CPUs besides CPU {args.cpu}")
    conditions = {
        "alone": [],
        "1 CPU at 10%": [(others[0], 0.001, 0.010)],
        "1 CPU at 100%": [(others[0], 1, 1)],
        "8 CPUs at 10%": [(cpu, 0.001, 0.010) for cpu in others[:8]],
        "8 CPUs at 100%": [(cpu, 1, 1) for cpu in others[:8]],
    }
    os.sched_setaffinity(0, {args.cpu})
    medians = {name: [] for name in conditions}
    for round_index in range(args.rounds):
        for name, loads in conditions.items():
            procs = []
            try:
                for cpu, on, period in loads:
                    procs.append(subprocess.Popen([sys.executable, "-c", LOAD, str(on), str(period)]))
                    os.sched_setaffinity(procs[-1].pid, {cpu})  # not the measured CPU
                time.sleep(0.5)  # the loads running before the loop starts
                times = loop_times_ms(args.seconds)
            finally:
                for proc in procs:
                    proc.kill()
                    proc.wait()
            deciles = statistics.quantiles(times, n=10)
            medians[name].append(statistics.median(times))
            print(f"round {round_index} {name:15s} lowest {min(times):.2f} p10 {deciles[0]:.2f} "
                  f"median {medians[name][-1]:.2f} p90 {deciles[-1]:.2f}", flush=True)
    for name, values in medians.items():
        print(f"{name:15s} medians {' '.join(f'{v:.2f}' for v in values)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
