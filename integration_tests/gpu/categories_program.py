#!/usr/bin/env python3
"""A PyTorch program for the categories suite (gpu_categories.py). It knows nothing about
cumemtrace: it trains one model for --steps steps and exits right after the last optimizer
step, its gradients and optimizer state still alive, as a one-step measurement script does.
With --stats FILE it writes what its own objects hold, read from PyTorch's allocator at the
end: for the parameters, buffers, gradients and optimizer state, the blocks (address and
size, from torch.cuda.memory_snapshot()) that hold their storages, and its counters.

Models: gpt (GPT-2-like, AdamW), resnet (ResNet-18-like with BatchNorm buffers, SGD with
momentum), mlp (deep MLP, Adam), onestep (the EP library's one-step measurement shape:
a deep MLP of --depth layers, one backprop step with SGD, exit).
"""
import argparse
import json

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(),
                                 nn.Linear(4 * width, width))

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab=8192, context=128, width=256, layers=4, heads=4):
        super().__init__()
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.tokens.weight

    def forward(self, ids):
        n = ids.shape[1]
        x = self.tokens(ids) + self.positions(torch.arange(n, device=ids.device))
        mask = torch.triu(torch.full((n, n), float("-inf"), device=ids.device), diagonal=1)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.ln(x))


def resnet_like():
    def basic(channels, stride):
        return nn.Sequential(nn.Conv2d(channels // stride, channels, 3, stride, 1, bias=False),
                             nn.BatchNorm2d(channels), nn.ReLU(),
                             nn.Conv2d(channels, channels, 3, 1, 1, bias=False),
                             nn.BatchNorm2d(channels), nn.ReLU())
    return nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                         basic(64, 1), basic(128, 2), basic(256, 2), basic(512, 2),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 10))


def mlp(depth, width, inputs=784, outputs=10):
    layers = [nn.Linear(inputs, width), nn.ReLU()]
    for _ in range(depth - 1):
        layers += [nn.Linear(width, width), nn.ReLU()]
    layers.append(nn.Linear(width, outputs))
    return nn.Sequential(*layers)


def build(args):
    """The model, its optimizer and one step's inputs maker and loss."""
    if args.model == "gpt":
        model = TinyGPT().cuda()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def batch():
            ids = torch.randint(0, 8192, (16, 128), device="cuda")
            return ids, ids

        def loss(out, target):
            return F.cross_entropy(out.flatten(0, 1), target.flatten())
    elif args.model == "resnet":
        model = resnet_like().cuda()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

        def batch():
            return (torch.randn(32, 3, 64, 64, device="cuda"),
                    torch.randint(0, 10, (32,), device="cuda"))
        loss = F.cross_entropy
    else:
        depth = args.depth if args.model == "onestep" else 20
        model = mlp(depth, args.width).cuda()
        optimizer = (torch.optim.SGD(model.parameters(), lr=0.01) if args.model == "onestep"
                     else torch.optim.Adam(model.parameters(), lr=1e-3))

        def batch():
            return (torch.randn(args.batch, 784, device="cuda"),
                    torch.randint(0, 10, (args.batch,), device="cuda"))
        loss = F.cross_entropy
    return model, optimizer, batch, loss


def blocks_of(tensors, snapshot):
    """The allocator's blocks that hold these tensors' storages: {address: size}."""
    starts = []
    for segment in snapshot:
        address = segment["address"]
        for block in segment["blocks"]:
            if block["state"] == "active_allocated":
                starts.append((address, block["size"]))
            address += block["size"]
    starts.sort()
    found = {}
    for tensor in tensors:
        if tensor is None or not tensor.is_cuda:
            continue
        pointer = tensor.untyped_storage().data_ptr()
        for address, size in starts:
            if address <= pointer < address + size:
                found[address] = size
                break
    return found


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True, choices=["gpt", "resnet", "mlp", "onestep"])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--stats")
    args = parser.parse_args()
    torch.manual_seed(0)
    model, optimizer, batch, loss_fn = build(args)
    steps = 1 if args.model == "onestep" else args.steps
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        inputs, target = batch()
        loss = loss_fn(model(inputs), target)
        loss.backward()
        del loss, inputs, target
        optimizer.step()
    torch.cuda.synchronize()
    if args.stats:
        snapshot = torch.cuda.memory_snapshot()
        parameters = list(model.parameters())
        state = [v for s in optimizer.state.values() for v in s.values()
                 if isinstance(v, torch.Tensor)]
        groups = {
            "parameter": blocks_of(parameters, snapshot),
            "buffer": blocks_of(list(model.buffers()), snapshot),
            "gradient": blocks_of([p.grad for p in parameters], snapshot),
            "optimizer_state": blocks_of(state, snapshot),
        }
        stats = {name: {"bytes": sum(found.values()), "blocks": len(found),
                        "addresses": sorted(found)} for name, found in groups.items()}
        stats["max_memory_allocated"] = torch.cuda.max_memory_allocated()
        stats["memory_allocated"] = torch.cuda.memory_allocated()
        stats["max_memory_reserved"] = torch.cuda.max_memory_reserved()
        stats["parameter_count"] = sum(p.numel() for p in parameters)
        with open(args.stats, "w") as f:
            json.dump(stats, f)
    print(f"{args.model}: {steps} steps done")


if __name__ == "__main__":
    main()
