#!/usr/bin/env python3
"""What naming parameters, gradients and optimizer state costs the program per optimizer
step: the time of the Python side's two step hooks (tracer/sources/python/
cumemtrace_categories.py), with the tracer's call replaced by one that only counts.

  categories_step_cost.py [--python-dir DIR] [--depth 48] [--width 256]
  cumemtrace run -- python3 categories_step_cost.py --traced [...]

--traced sends to the tracer's own cumemtrace_tensor_categories (under `cumemtrace run`)
rather than to a stand-in that only counts, and first times that call alone, with one
storage and with one per parameter.

Needs any torch, CPU-only is enough: its tensors stand in for CUDA ones (get_device() is
shifted from -1 to 0, which adds a Python call per tensor, and a torch older than 2.1 gets
`nbytes` as a Python property), so the figure is an upper bound of the hooks' own time.
--python-dir names another copy of the file (an older commit's) to compare."""
import argparse
import array
import inspect
import os
import statistics
import sys
import time
import timeit

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--python-dir", default=os.path.join(HERE, "..", "..", "tracer", "sources",
                                                         "python"))
parser.add_argument("--depth", type=int, default=48)
parser.add_argument("--width", type=int, default=256)
parser.add_argument("--traced", action="store_true",
                    help="send to the tracer (run under `cumemtrace run`)")
args = parser.parse_args()
sys.path.insert(0, args.python_dir)
import cumemtrace_categories as categories  # noqa: E402

sent = [0]


def count(category, how_many, addresses, sizes, devices, timestamp_ns):
    sent[0] += how_many


if args.traced:
    import ctypes
    tracer_send = ctypes.CDLL(None).cumemtrace_tensor_categories  # AttributeError: not traced
    tracer_send.argtypes = [ctypes.c_uint32, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_void_p,
                            ctypes.c_void_p, ctypes.c_uint64]
    tracer_send.restype = ctypes.c_uint32

    def count_and_send(category, how_many, addresses, sizes, devices, timestamp_ns):
        sent[0] += how_many
        return tracer_send(category, how_many, addresses, sizes, devices, timestamp_ns)
    categories._send = count_and_send

    def time_tracer_call(storages):
        addresses = array.array("Q", range(1 << 20, (1 << 20) + 512 * storages, 512))
        sizes, devices = array.array("Q", [512] * storages), array.array("I", [0] * storages)
        pointers = [v.buffer_info()[0] for v in (addresses, sizes, devices)]
        best = min(timeit.repeat(lambda: tracer_send(3, storages, *pointers, 0), number=2000,
                                 repeat=7)) / 2000
        print(f"the tracer's call with {storages} storages: {best * 1e6:.2f} us "
              f"({best * 1e9 / storages:.0f} ns per storage)")
else:
    categories._send = count
categories._Tensor = torch.Tensor
if not hasattr(torch.Tensor, "nbytes"):
    torch.Tensor.nbytes = property(lambda t: t.numel() * t.element_size())
cpu_device = torch.Tensor.get_device
torch.Tensor.get_device = lambda self: cpu_device(self) + 1

layers = []
for _ in range(args.depth):
    layers += [torch.nn.Linear(args.width, args.width), torch.nn.ReLU()]
model = torch.nn.Sequential(*layers, torch.nn.Linear(args.width, 10))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
x, y = torch.randn(4, args.width), torch.randint(0, 10, (4,))
torch.nn.functional.cross_entropy(model(x), y).backward()
optimizer.step()  # the state exists from here, as after a program's first step

if "torch" in inspect.signature(categories._send_optimizer).parameters:  # an older file
    def hooks():
        categories._send_optimizer(optimizer, torch, state=False)
        categories._send_tensors(categories.OPTIMIZER_STATE,
                                 list(categories._state_tensors(optimizer, torch)),
                                 owner=optimizer)
elif not hasattr(categories, "_state_due"):
    def hooks():
        categories._send_optimizer(optimizer, state=False)
        categories._send_tensors(categories.OPTIMIZER_STATE,
                                 categories._state_tensors(optimizer), owner=optimizer)
elif not hasattr(categories, "_before_step"):  # the state read at its intervals
    def hooks():
        categories._send_optimizer(optimizer, state=False)
        if categories._state_due(optimizer):
            categories._state_read(optimizer, categories._send_tensors(
                categories.OPTIMIZER_STATE, categories._state_tensors(optimizer),
                owner=optimizer))
else:  # the file's own step hooks
    def hooks():
        categories._before_step(optimizer, (), {})
        categories._after_step(optimizer, (), {})

for _ in range(200):
    hooks()
sent[0] = 0
rounds = []
for _ in range(15):
    start = time.perf_counter()
    for _ in range(200):
        hooks()
    rounds.append((time.perf_counter() - start) / 200)
parameters = sum(1 for group in optimizer.param_groups for _ in group["params"])
if args.traced:
    time_tracer_call(1)
    time_tracer_call(parameters)
print(f"MLP {args.depth}x{args.width} under Adam, {parameters} parameters: "
      f"{statistics.median(rounds) * 1e6:.1f} us per step (lowest round "
      f"{min(rounds) * 1e6:.1f}), {sent[0] // (15 * 200)} storages sent per step")
