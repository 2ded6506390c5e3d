#!/usr/bin/env python3
"""A PyTorch program for the bridge suite (gpu_bridge.py): trains one of the benchmark
workloads (benchmarks/gpu/workloads.py) for a few steps with the allocator the environment
gives it. It knows nothing about cumemtrace. Prints one line per step count and, with
--stats FILE, writes PyTorch's own counters (max_memory_allocated / max_memory_reserved).
"""
import argparse
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "benchmarks", "gpu"))
import workloads  # noqa: E402


def graph_step(replays):
    """Whole-step capture as in PyTorch's CUDA graphs guide: warm-up on a side stream, capture
    forward, backward and the optimizer step, replay with new inputs copied in. The MLP is
    large enough (about 0.9 GB of weights, gradients and momentum, activations of 128 MiB each) that
    the program's peak falls here, so the suite's peak checks hold the private pool too."""
    model = torch.nn.Sequential(torch.nn.Linear(1024, 8192), torch.nn.ReLU(),
                                torch.nn.Linear(8192, 8192), torch.nn.ReLU(),
                                torch.nn.Linear(8192, 10)).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    static_input = torch.randn(4096, 1024, device="cuda")
    static_target = torch.randint(0, 10, (4096,), device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            optimizer.zero_grad(set_to_none=True)
            loss_fn(model(static_input), static_target).backward()
            optimizer.step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    optimizer.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        static_loss = loss_fn(model(static_input), static_target)
        static_loss.backward()
        optimizer.step()
    for _ in range(replays):
        static_input.copy_(torch.randn(4096, 1024, device="cuda"))
        static_target.copy_(torch.randint(0, 10, (4096,), device="cuda"))
        graph.replay()
    torch.cuda.synchronize()
    del graph, static_loss, static_input, static_target, optimizer, model
    # cuBLAS keeps a workspace per stream, the side stream's and the capture's included.
    if hasattr(torch._C, "_cuda_clearCublasWorkspaces"):
        torch._C._cuda_clearCublasWorkspaces()
    torch.cuda.empty_cache()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--workload", required=True, choices=sorted(workloads.WORKLOADS))
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--stats")
    parser.add_argument("--reset-accumulated", action="store_true",
                        help="first reset the allocator's cumulative counters right after a "
                             "tensor that takes a whole segment (a block larger than asked)")
    parser.add_argument("--cuda-graph", action="store_true",
                        help="after the steps, capture one training step of a small MLP in a "
                             "CUDA graph (its tensors come from a private pool), replay it, "
                             "then free the graph and empty the cache")
    args = parser.parse_args()
    torch.manual_seed(0)
    if args.reset_accumulated:
        # 15,800,000 bytes get a 16 MiB segment that is not split (less than 1 MiB would be
        # left), so the block is 977,216 bytes larger than the tensor; the reset comes before
        # the allocator's next event, which would otherwise give the block's size.
        whole = torch.empty(15_800_000, dtype=torch.uint8, device="cuda")
        torch.cuda.reset_accumulated_memory_stats()
        after = torch.empty(1000, device="cuda")
        del whole, after
    step = workloads.WORKLOADS[args.workload][0]()
    for _ in range(args.steps):
        step()
    if args.cuda_graph:
        graph_step(replays=3)
    torch.cuda.synchronize()
    print(f"{args.workload}: {args.steps} steps done")
    if args.stats:
        with open(args.stats, "w") as f:
            json.dump({"max_memory_allocated": torch.cuda.max_memory_allocated(0),
                       "max_memory_reserved": torch.cuda.max_memory_reserved(0),
                       "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
