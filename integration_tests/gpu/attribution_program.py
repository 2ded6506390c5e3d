#!/usr/bin/env python3
"""One training step of the suite's GPT-2-like model (categories_program.py's TinyGPT, AdamW),
measured by the program itself for `cumemtrace run --modules --ops` (gpu_attribution.py).

With `--stats FILE` it writes, from its own forward hooks on every module (installed after
cumemtrace's, so they never change what cumemtrace sees), the bytes each module's forward
left allocated, its children's included, (torch.cuda.memory_allocated() after its forward minus before: its
outputs and what autograd saved), by module path; the step's max_memory_allocated; and the
memory_allocated when backward began. A hand count of what each module holds while the
step's activations are all live.
"""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from categories_program import TinyGPT  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--stats")
    parser.add_argument("--steps", type=int, default=1)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = TinyGPT().cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    left = {}
    names = {module: name for name, module in model.named_modules()}
    before = {}

    def pre(module, inputs):
        before[module] = torch.cuda.memory_allocated()

    def post(module, inputs, output):
        name = names.get(module)
        if name is not None:
            name = name or f"<{type(module).__name__}>"
            left[name] = left.get(name, 0) + torch.cuda.memory_allocated() - before.pop(module)

    handles = [m.register_forward_pre_hook(pre) for m in model.modules()]
    handles += [m.register_forward_hook(post) for m in model.modules()]
    at_backward = 0
    for step in range(args.steps):
        optimizer.zero_grad(set_to_none=True)
        ids = torch.randint(0, 8192, (16, 128), device="cuda")
        out = model(ids)
        loss = F.cross_entropy(out.flatten(0, 1), ids.flatten())
        at_backward = torch.cuda.memory_allocated()
        loss.backward()
        del loss, out
        optimizer.step()
    torch.cuda.synchronize()
    for handle in handles:
        handle.remove()
    if args.stats:
        with open(args.stats, "w") as f:
            json.dump({"forward_left_by_module": left,
                       "max_memory_allocated": torch.cuda.max_memory_allocated(),
                       "allocated_at_backward": at_backward,
                       "module_paths": sorted(n for n in names.values() if n)}, f)
    print(f"attribution: {args.steps} steps done")


if __name__ == "__main__":
    main()
