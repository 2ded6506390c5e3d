"""GPU workloads for measuring tracing overhead (benchmarks/gpu/overhead.py runs them).

One process measures every workload in turn and prints one JSON line:
  {"mlp": ms per step, "launch": ms per step, "alloc": microseconds per allocation+free}
Each figure is the median of several timed rounds after a warm-up, with the GPU synchronized
at the end of every round. --recorder turns on one of PyTorch's own memory recorders around
the timed rounds, to compare with them in the same session.
"""
import argparse
import json
import os
import statistics
import time

import torch


def mlp(depth, width, batch):
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(width, 10)).cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    x = torch.randn(batch, width, device="cuda")
    y = torch.randint(0, 10, (batch,), device="cuda")
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        torch.cuda.nvtx.range_push("forward")
        loss = loss_fn(model(x), y)
        torch.cuda.nvtx.range_pop()
        torch.cuda.nvtx.range_push("backward")
        loss.backward()
        torch.cuda.nvtx.range_pop()
        torch.cuda.nvtx.range_push("optimizer")
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.nvtx.range_pop()
    return step


def alloc_loop(count):
    def step():
        for _ in range(count):
            t = torch.empty(4096, device="cuda")
            del t
    return step


def timed(step, warmup, rounds, per_round):
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(per_round):
            step()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - start) / per_round)
    return statistics.median(samples)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--recorder", choices=["none", "history", "profiler"], default="none")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", help="comma list of workloads to run (mlp, launch, alloc)")
    parser.add_argument("--pin", type=int, help="run the main thread alone on this CPU")
    args = parser.parse_args()
    if args.pin is not None:
        # This thread only (threads started later inherit it: PyTorch's autograd worker runs
        # while this one waits); the tracer's and the collector's threads stay elsewhere.
        os.sched_setaffinity(0, {args.pin})
    torch.manual_seed(0)
    workloads = {
        "mlp": (mlp(8, 2048, 256), 30, 40, 1e3),        # ms per step
        "launch": (mlp(48, 256, 32), 20, 20, 1e3),      # ms per step
        "alloc": (alloc_loop(20000), 1, 1, 1e6 / 20000),  # us per allocation + free
    }
    if args.only:
        workloads = {k: v for k, v in workloads.items() if k in args.only.split(",")}
    recorder = None
    if args.recorder == "history":
        torch.cuda.memory._record_memory_history(stacks="python")
    elif args.recorder == "profiler":
        from torch.profiler import ProfilerActivity, profile
        recorder = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                           profile_memory=True)
        recorder.__enter__()
    result = {}
    for name, (step, warmup, per_round, scale) in workloads.items():
        result[name] = timed(step, warmup, args.rounds, per_round) * scale
    if recorder is not None:
        recorder.__exit__(None, None, None)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
