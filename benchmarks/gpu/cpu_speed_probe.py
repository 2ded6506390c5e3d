#!/usr/bin/env python3
"""Whether the machine's CPU or its GPU changes speed under a Python-bound program.

Pinned to one CPU, it times, around each EP training step (workloads.py's ep50), a fixed
Python loop (2 million additions) and 20 matmuls of 8192x8192 on the GPU, and prints each
figure's spread, (max - min) / median. On the GPU machine the loop spread by 58-82% while
the matmuls stayed within 0.3% (docs/benchmarks.md, "The machine's CPU changes speed").

  cpu_speed_probe.py [--steps 12] [--cpu 8]
Run it under `cumemtrace run` as well to see the same with the tracer.
"""
import argparse
import os
import statistics
import time

import torch

import workloads


def python_loop_ms():
    start = time.perf_counter()
    total = 0
    for i in range(2_000_000):
        total += i
    return (time.perf_counter() - start) * 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--cpu", type=int, default=8)
    args = parser.parse_args()
    os.sched_setaffinity(0, {args.cpu})
    step = workloads.ep_step(50, 30)
    a = torch.randn(8192, 8192, device="cuda")

    def matmuls_ms():
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(20):
            a @ a
        torch.cuda.synchronize()
        return (time.perf_counter() - start) * 1e3

    step()
    torch.cuda.synchronize()
    columns = {"loop before": [], "matmuls": [], "step": [], "loop after": []}
    for _ in range(args.steps):
        columns["loop before"].append(python_loop_ms())
        columns["matmuls"].append(matmuls_ms())
        start = time.perf_counter()
        step()
        torch.cuda.synchronize()
        columns["step"].append((time.perf_counter() - start) * 1e3)
        columns["loop after"].append(python_loop_ms())
        print("  ".join(f"{k} {v[-1]:7.1f} ms" for k, v in columns.items()), flush=True)
    for name, values in columns.items():
        spread = (max(values) - min(values)) / statistics.median(values)
        print(f"{name}: {min(values):.1f}-{max(values):.1f} ms, spread {spread:.0%}")


if __name__ == "__main__":
    main()
