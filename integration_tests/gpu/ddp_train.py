"""A DistributedDataParallel training script (one process per GPU, NCCL) with NVTX phases.

Each rank trains on a batch of --batch x (rank + 1) samples, so the ranks' memory differs on
purpose. --stats-dir DIR writes each rank's own torch.cuda.max_memory_allocated() to
DIR/rank-<r>.json, for the GPU suite to compare with cumemtrace's per-rank peaks. Launch it
with torchrun; it knows nothing about cumemtrace.
"""
import argparse
import json
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--depth", type=int, default=8)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--stats-dir")
    args = parser.parse_args()

    rank = int(os.environ["RANK"])
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    torch.manual_seed(0)
    layers = []
    for _ in range(args.depth):
        layers += [torch.nn.Linear(args.width, args.width), torch.nn.ReLU()]
    model = DistributedDataParallel(torch.nn.Sequential(*layers).cuda())
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    x = torch.randn(args.batch * (rank + 1), args.width, device="cuda")
    for _ in range(args.steps):
        torch.cuda.nvtx.range_push("forward")
        loss = model(x).square().mean()
        torch.cuda.nvtx.range_pop()
        torch.cuda.nvtx.range_push("backward")
        loss.backward()  # gradients all-reduced through NCCL
        torch.cuda.nvtx.range_pop()
        torch.cuda.nvtx.range_push("optimizer")
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    if args.stats_dir:
        os.makedirs(args.stats_dir, exist_ok=True)
        with open(os.path.join(args.stats_dir, f"rank-{rank}.json"), "w") as f:
            json.dump({"rank": rank,
                       "max_memory_allocated": torch.cuda.max_memory_allocated()}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
