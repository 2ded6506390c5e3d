#!/usr/bin/env python3
"""A small PyTorch training step for `run --stacks` (gpu_stacks.py): the model's forward makes
one activation far larger than any other (`wide`, 128 MiB, with its 128 MiB temporary on the
same line), kept for the backward pass (ReLU's output, fc2's input), so it is live at the peak. The program finds the line that allocates it in its own source (the line
marked STACKS_MARK) and writes it with its size to --stats."""
import argparse
import json
import time

import torch
from torch import nn

BATCH = 1024
WIDEN = 8


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(1024, 4096)
        self.fc2 = nn.Linear(4096 * WIDEN, 256)

    def forward(self, x):
        h = self.fc1(x)
        wide = torch.relu(h.repeat(1, WIDEN))  # STACKS_MARK: the largest activation
        return self.fc2(wide)


def marked_line():
    with open(__file__) as f:
        for number, text in enumerate(f, start=1):
            if "# STACKS_MARK" in text and "marked_line" not in text:
                return number
    raise SystemExit("no STACKS_MARK line")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--stats", required=True)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = Model().cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(BATCH, 1024, device="cuda")
    target = torch.randn(BATCH, 256, device="cuda")
    torch.cuda.synchronize()
    started = time.monotonic()
    for _ in range(args.steps):
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(model(x), target)
        loss.backward()
        optimizer.step()
    torch.cuda.synchronize()
    seconds = time.monotonic() - started
    with open(args.stats, "w") as f:
        json.dump({"file": __file__, "line": marked_line(), "function": "Model.forward",
                   "wide_bytes": BATCH * 4096 * WIDEN * 4, "seconds": seconds,
                   "max_memory_allocated": torch.cuda.max_memory_allocated()}, f)


if __name__ == "__main__":
    main()
