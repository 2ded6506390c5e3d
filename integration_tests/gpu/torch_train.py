"""A small PyTorch training script with NVTX phases (forward / backward / optimizer).

It knows nothing about cumemtrace. With --stats FILE it writes PyTorch's own view of its
memory (max_memory_allocated / max_memory_reserved) so the GPU suite can compare the two.
"""
import argparse
import json
import os
import signal
import sys

import torch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--depth", type=int, default=8)
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--stats", help="write PyTorch's memory counters here (JSON)")
    parser.add_argument("--exit-code", type=int, default=0)
    parser.add_argument("--kill-self", help="end by this signal (e.g. SIGTERM) after training")
    args = parser.parse_args()

    torch.manual_seed(0)  # identical output traced and untraced
    device = torch.device("cuda", 0)
    layers = []
    for _ in range(args.depth):
        layers += [torch.nn.Linear(args.width, args.width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(args.width, 10)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(args.batch, args.width, device=device)
    y = torch.randint(0, 10, (args.batch,), device=device)
    loss_fn = torch.nn.CrossEntropyLoss()

    for step in range(args.steps):
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
    torch.cuda.synchronize()
    print(f"final loss {loss.item():.4f}")

    if args.stats:
        with open(args.stats, "w") as f:
            json.dump({
                "max_memory_allocated": torch.cuda.max_memory_allocated(device),
                "max_memory_reserved": torch.cuda.max_memory_reserved(device),
                "allocator_backend": torch.cuda.memory.get_allocator_backend(),
            }, f)
    sys.stdout.flush()
    if args.kill_self:
        os.kill(os.getpid(), getattr(signal, args.kill_self))
    sys.exit(args.exit_code)


if __name__ == "__main__":
    main()
