"""A PyTorch training loop that opens torch.profiler for a few steps in the middle, as a user
profiling one part of a run does. It knows nothing about cumemtrace.

  torch_profiled.py --out FILE [--windows N] [--record-shapes] [--steps S]

Each profiled window is N_STEPS steps inside `torch.profiler.profile(activities=[CUDA],
profile_memory=True)`. Around each window the program measures its own allocator peak
(reset_peak_memory_stats before, max_memory_allocated after) and marks the window for the
trace with two allocations of sizes nothing else uses (the GPU suite finds them in the
trace). FILE receives, per window, what the profiler saw (kernel names and counts from
key_averages(), its memory events) and the allocator peak.
"""
import argparse
import collections
import json

import torch
from torch.profiler import ProfilerActivity, profile

WINDOW_STEPS = 2
# Window markers: sizes no tensor of this program has (odd byte counts).
MARK_BEFORE = 1_234_567
MARK_AFTER = 2_345_679


def mark(nbytes):
    t = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    del t


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--windows", type=int, default=1)
    parser.add_argument("--record-shapes", action="store_true")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--batch", type=int, default=128)
    args = parser.parse_args()

    torch.manual_seed(0)
    device = torch.device("cuda", 0)
    layers = []
    for _ in range(args.depth):
        layers += [torch.nn.Linear(args.width, args.width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(args.width, 10)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(args.batch, args.width, device=device)
    y = torch.randint(0, 10, (args.batch,), device=device)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    # Windows start after 2 warm-up steps and are 2 plain steps apart.
    starts = [2 + k * (WINDOW_STEPS + 2) for k in range(args.windows)]
    total = max(args.steps, (starts[-1] + WINDOW_STEPS + 2) if starts else args.steps)
    windows = []
    s = 0
    while s < total:
        if s in starts:
            torch.cuda.synchronize()
            mark(MARK_BEFORE)
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats(device)
            with profile(activities=[ProfilerActivity.CUDA], profile_memory=True,
                         record_shapes=args.record_shapes) as prof:
                for _ in range(WINDOW_STEPS):
                    loss = step()
                torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated(device)
            mark(MARK_AFTER)
            torch.cuda.synchronize()
            kernels = collections.Counter()
            for e in prof.key_averages():
                if e.device_type == torch.autograd.DeviceType.CUDA:
                    kernels[e.key] += e.count
            memory = [e for e in prof.events() if e.name == "[memory]"]
            sizes = [getattr(e, "device_memory_usage", getattr(e, "cuda_memory_usage", 0))
                     for e in memory]
            windows.append({
                "kernels": dict(sorted(kernels.items())),
                "memory_events": len(memory),
                "memory_allocated_bytes": sum(v for v in sizes if v > 0),
                "memory_freed_bytes": -sum(v for v in sizes if v < 0),
                "max_memory_allocated": peak,
            })
            s += WINDOW_STEPS
        else:
            loss = step()
            s += 1
    torch.cuda.synchronize()
    print(f"final loss {loss.item():.4f}")
    with open(args.out, "w") as f:
        json.dump({"windows": windows,
                   "allocator_backend": torch.cuda.memory.get_allocator_backend(),
                   "marks": [MARK_BEFORE, MARK_AFTER]}, f, indent=1)


if __name__ == "__main__":
    main()
