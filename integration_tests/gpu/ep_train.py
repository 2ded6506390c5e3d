"""Equilibrium Propagation (EP) and backprop (BP) training of a deep MLP, for cumemtrace.

EP steps: free settling, nudged settling, energy, contrast, update (Scellier & Bengio's
scheme on a layered Hopfield-like energy). --bp trains the same network with backprop
(forward, backward, optimizer). NVTX ranges label the phases unless --no-nvtx is given:
then the program has no NVTX at all and can be labeled from outside with
`cumemtrace run --phase settling/free=ep_train:EPTrainer.settle_free ...`.

--verify FILE writes the program's own view of each phase: for every call,
torch.cuda.max_memory_allocated() minus the memory allocated at its entry, and the bytes of
the weights and of the optimizer's buffers.

--iterations 1 --momentum is what research scripts measure (build the model, one step, read
the peak, exit): SGD's momentum buffers are made before the step, so the optimizer's state is
alive at the peak like the weights, and both are freed only at interpreter exit.
"""
import argparse
import json
import sys
from collections import defaultdict
from contextlib import contextmanager

import torch


class PhaseLog:
    """The in-process measurement (--verify) and the NVTX labels, around each phase."""

    def __init__(self, nvtx, verify, momentum=False):
        self.nvtx = nvtx
        self.verify = verify
        self.momentum = momentum
        self.above_entry = defaultdict(list)

    @contextmanager
    def __call__(self, name):
        if self.nvtx:
            torch.cuda.nvtx.range_push(name)
        if self.verify:
            entry = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        try:
            yield
        finally:
            if self.verify:
                self.above_entry[name].append(torch.cuda.max_memory_allocated() - entry)
            if self.nvtx:
                torch.cuda.nvtx.range_pop()


def make_optimizer(params, lr, momentum):
    if not momentum:
        return torch.optim.SGD(params, lr=lr)
    optimizer = torch.optim.SGD(params, lr=lr, momentum=0.9)
    for p in params:  # SGD takes an existing buffer as its state
        optimizer.state[p]["momentum_buffer"] = torch.zeros_like(p)
    return optimizer


def optimizer_bytes(optimizer):
    return sum(t.numel() * t.element_size() for state in optimizer.state.values()
               for t in state.values() if torch.is_tensor(t) and t.is_cuda)


class EPTrainer:
    def __init__(self, depth, width, inputs, classes, beta, steps, lr, log):
        self.log = log
        self.beta = beta
        self.steps = steps
        sizes = [inputs] + [width] * depth + [classes]
        self.weights = [torch.nn.Parameter(torch.randn(sizes[i + 1], sizes[i], device="cuda")
                                           / sizes[i] ** 0.5)
                        for i in range(len(sizes) - 1)]
        self.optimizer = make_optimizer(self.weights, lr, log.momentum)

    def energy_of(self, x, states):
        """E = 1/2 sum |s|^2 - sum s_l . W_l rho(s_{l-1})."""
        rho = torch.sigmoid
        energy = 0.5 * sum((s * s).sum() for s in states)
        below = x
        for w, s in zip(self.weights, states):
            energy = energy - (s * (rho(below) @ w.t())).sum()
            below = s
        return energy

    def relax(self, x, states, target, beta):
        for _ in range(self.steps):
            states = [s.detach().requires_grad_(True) for s in states]
            energy = self.energy_of(x, states)
            if beta != 0.0:
                energy = energy + beta * torch.nn.functional.cross_entropy(states[-1], target)
            grads = torch.autograd.grad(energy, states)
            states = [s - 0.5 * g for s, g in zip(states, grads)]
        return [s.detach() for s in states]

    def settle_free(self, x, states):
        return self.relax(x, states, None, 0.0)

    def settle_nudged(self, x, states, target):
        return self.relax(x, states, target, self.beta)

    def energy(self, x, free, nudged, target):
        e_free = self.energy_of(x, free)
        e_nudged = self.energy_of(x, nudged) + self.beta * torch.nn.functional.cross_entropy(
            nudged[-1], target)
        return e_free, e_nudged

    def contrast(self, e_free, e_nudged):
        ((e_nudged - e_free) / self.beta).backward()

    def update(self):
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def train_step(self, x, target):
        batch = x.shape[0]
        states = [torch.zeros(batch, w.shape[0], device="cuda") for w in self.weights]
        with self.log("settle_free"):
            free = self.settle_free(x, states)
        with self.log("settle_nudged"):
            nudged = self.settle_nudged(x, free, target)
        with self.log("energy"):
            e_free, e_nudged = self.energy(x, free, nudged, target)
        with self.log("contrast"):
            self.contrast(e_free, e_nudged)
        with self.log("update"):
            self.update()


class BPTrainer:
    def __init__(self, depth, width, inputs, classes, lr, log):
        self.log = log
        layers = []
        sizes = [inputs] + [width] * depth
        for i in range(depth):
            layers += [torch.nn.Linear(sizes[i], sizes[i + 1]), torch.nn.Sigmoid()]
        self.model = torch.nn.Sequential(*layers, torch.nn.Linear(width, classes)).cuda()
        self.optimizer = make_optimizer(list(self.model.parameters()), lr, log.momentum)

    def forward(self, x, target):
        return torch.nn.functional.cross_entropy(self.model(x), target)

    def backward(self, loss):
        loss.backward()

    def step(self):
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def train_step(self, x, target):
        with self.log("forward"):
            loss = self.forward(x, target)
        with self.log("backward"):
            self.backward(loss)
        with self.log("optimizer"):
            self.step()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--depth", type=int, default=10)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--inputs", type=int, default=784)
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--settle-steps", type=int, default=4)
    parser.add_argument("--beta", type=float, default=0.5)
    parser.add_argument("--bp", action="store_true", help="train with backprop instead of EP")
    parser.add_argument("--momentum", action="store_true",
                        help="SGD with momentum buffers made before the first step")
    parser.add_argument("--no-nvtx", action="store_true", help="no NVTX ranges at all")
    parser.add_argument("--verify", help="write the in-process per-phase measurement here")
    args = parser.parse_args()

    torch.manual_seed(0)
    log = PhaseLog(nvtx=not args.no_nvtx, verify=args.verify is not None, momentum=args.momentum)
    if args.bp:
        trainer = BPTrainer(args.depth, args.width, args.inputs, 10, 0.01, log)
    else:
        trainer = EPTrainer(args.depth, args.width, args.inputs, 10, args.beta,
                            args.settle_steps, 0.01, log)
    x = torch.randn(args.batch, args.inputs, device="cuda")
    target = torch.randint(0, 10, (args.batch,), device="cuda")
    for _ in range(args.iterations):
        trainer.train_step(x, target)
    torch.cuda.synchronize()
    weights = sum(p.numel() * p.element_size()
                  for p in (trainer.weights if not args.bp else trainer.model.parameters()))
    print(f"{'BP' if args.bp else 'EP'} depth {args.depth}: done, weights {weights} B")
    if args.verify:
        with open(args.verify, "w") as f:
            json.dump({"weights_bytes": weights,
                       "optimizer_bytes": optimizer_bytes(trainer.optimizer),
                       "above_entry": log.above_entry}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
