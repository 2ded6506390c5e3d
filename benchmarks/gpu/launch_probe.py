#!/usr/bin/env python3
"""What one kernel launch costs a PyTorch program: x.add_(1) on a one-element CUDA tensor,
20,000 times per repetition after 2,000 warm-up ops, 7 repetitions; prints the median in us
per op as one JSON line. Run it untraced and under each `cumemtrace run` mode, in
interleaved processes (docs/benchmarks.md):

  taskset -c 8 python3 launch_probe.py
  cumemtrace run --quiet [--no-kernels|--kernels] -- taskset -c 8 python3 launch_probe.py
"""
import json
import time

import torch


def main():
    x = torch.zeros(1, device="cuda")

    def ops(n):
        for _ in range(n):
            x.add_(1)

    ops(2000)
    torch.cuda.synchronize()
    times = []
    for _ in range(7):
        start = time.perf_counter()
        ops(20000)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) / 20000 * 1e6)
    print(json.dumps({"us_per_op": sorted(times)[len(times) // 2]}))


if __name__ == "__main__":
    main()
