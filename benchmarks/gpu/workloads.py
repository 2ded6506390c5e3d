"""GPU workloads for measuring tracing overhead (benchmarks/gpu/overhead.py runs them).

One process measures the workloads it is given (--only) in turn and prints one JSON line:
  {"mlp": ms per step, "mlp@spread": 0.02, "alloc": microseconds per allocation+free, ...}
Each figure is the median of several timed rounds after a warm-up, with the GPU synchronized
at the end of every round; W@spread is (max - min) / median of W's rounds. --recorder turns
on one of PyTorch's own memory recorders around the timed rounds, to compare with them in the
same session. --tracker-probe LIB:MODE attaches the allocator trace tracker of
tracker_cost_probe.cc (built by tracker_costs.sh) in MODE.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

from alternating_windows import alternating_times, lowest_decile_and_median

HERE = os.path.dirname(os.path.abspath(__file__))


def mlp(depth, width, batch):
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(width, 10)).cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    x = torch.randn(batch, width, device="cuda")
    y = torch.randint(0, 10, (batch,), device="cuda")
    return train_step(model, optimizer, x, y)


def ep_step(depth, settle_steps, settle_times=False):
    """One training step of Equilibrium Propagation on a deep MLP 784-128-...-10 (depth
    hidden layers of 128, batch 32): a free and a nudged phase of `settle_steps` settling
    iterations each, every one a handful of tiny ops per layer (integration_tests/gpu/
    ep_train.py's trainer). With settle_times, the step keeps each settling iteration's
    start and end on the CPU in step.settle_spans (the function settle_times)."""
    sys.path.insert(0, os.path.join(HERE, "..", "..", "integration_tests", "gpu"))
    import ep_train

    class SettleTimedTrainer(ep_train.EPTrainer):
        """Marks the time of each settling iteration's energy, the first thing it does, and
        keeps the iterations' (start, end) in settle_spans (set by ep_step)."""
        marks = None

        def relax(self, x, states, target, beta):
            self.marks = []
            states = super().relax(x, states, target, beta)
            self.marks.append(time.perf_counter())
            self.settle_spans += list(zip(self.marks, self.marks[1:]))
            self.marks = None
            return states

        def energy_of(self, x, states):
            if self.marks is not None:
                self.marks.append(time.perf_counter())
            return super().energy_of(x, states)

    log = ep_train.PhaseLog(nvtx=True, verify=False)
    kind = SettleTimedTrainer if settle_times else ep_train.EPTrainer
    trainer = kind(depth, 128, 784, 10, 0.5, settle_steps, 0.01, log)
    x = torch.randn(32, 784, device="cuda")
    target = torch.randint(0, 10, (32,), device="cuda")

    def step():
        trainer.train_step(x, target)
    if settle_times:
        step.settle_spans = trainer.settle_spans = []
    return step


class BasicBlock(torch.nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(cout)
        self.conv2 = torch.nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = torch.nn.Sequential(torch.nn.Conv2d(cin, cout, 1, stride, bias=False),
                                            torch.nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + (x if self.down is None else self.down(x)))


def resnet18_like(batch=32, size=224):
    """ResNet-18's layout (4 stages of 2 basic blocks, 64 to 512 channels), written out so
    that the benchmark needs no torchvision; SGD with momentum, batch 32 at 224x224."""
    layers = [torch.nn.Conv2d(3, 64, 7, 2, 3, bias=False), torch.nn.BatchNorm2d(64),
              torch.nn.ReLU(), torch.nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for cout, stride in [(64, 1), (128, 2), (256, 2), (512, 2)]:
        layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
        cin = cout
    layers += [torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(512, 1000)]
    model = torch.nn.Sequential(*layers).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, 3, size, size, device="cuda")
    y = torch.randint(0, 1000, (batch,), device="cuda")
    return train_step(model, optimizer, x, y)


class GptBlock(torch.nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = torch.nn.LayerNorm(width)
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.proj = torch.nn.Linear(width, width)
        self.ln2 = torch.nn.LayerNorm(width)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(),
                                       torch.nn.Linear(4 * width, width))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        shape = (b, t, self.heads, c // self.heads)
        q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


class GptLike(torch.nn.Module):
    def __init__(self, vocab, context, width, heads, depth):
        super().__init__()
        self.tokens = torch.nn.Embedding(vocab, width)
        self.positions = torch.nn.Embedding(context, width)
        self.blocks = torch.nn.Sequential(*[GptBlock(width, heads) for _ in range(depth)])
        self.ln = torch.nn.LayerNorm(width)
        self.head = torch.nn.Linear(width, vocab, bias=False)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tokens(idx) + self.positions(torch.arange(t, device=idx.device))
        return self.head(self.ln(self.blocks(x)))


def gpt2_like(batch=8, context=512, depth=12):
    """GPT-2 small's shape (12 layers, width 768, 12 heads, vocabulary 50257), context 512,
    batch 8, AdamW."""
    model = GptLike(50257, context, 768, 12, depth).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    idx = torch.randint(0, 50257, (batch, context), device="cuda")
    target = torch.randint(0, 50257, (batch * context,), device="cuda")
    return train_step(model, optimizer, idx, target)


def train_step(model, optimizer, x, y):
    """One forward/backward/optimizer step in NVTX phases. The output's leading dimensions are
    flattened onto the targets' (a transformer's tokens; a no-op for (batch, classes))."""
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        torch.cuda.nvtx.range_push("forward")
        loss = loss_fn(model(x).flatten(0, -2), y)
        torch.cuda.nvtx.range_pop()
        torch.cuda.nvtx.range_push("backward")
        loss.backward()
        torch.cuda.nvtx.range_pop()
        torch.cuda.nvtx.range_push("optimizer")
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.nvtx.range_pop()
    return step


# name -> (maker, warm-up steps, steps per timed round, scale to the unit). Made lazily: a
# run of one workload does not build the others' models.
WORKLOADS = {
    "mlp": (lambda: mlp(8, 2048, 256), 30, 40, 1e3),          # ms per step
    "launch": (lambda: mlp(48, 256, 32), 20, 20, 1e3),        # ms per step
    "alloc": (lambda: alloc_loop(20000), 1, 1, 1e6 / 20000),  # us per allocation + free
    "ep50": (lambda: ep_step(50, 30), 1, 1, 1e3),             # ms per step (about 1 s)
    "ep200": (lambda: ep_step(200, 30), 1, 1, 1e3),           # ms per step (a few s)
    "resnet": (lambda: resnet18_like(), 5, 10, 1e3),          # ms per step
    "gpt": (lambda: gpt2_like(), 3, 5, 1e3),                  # ms per step
    # The EP steps again, each settling iteration timed on its own (SettleTimes).
    "ep50-settle": (lambda: ep_step(50, 30, settle_times=True), 1, 1, 1e3),
    "ep200-settle": (lambda: ep_step(200, 30, settle_times=True), 1, 1, 1e3),
}
UNITS = {"alloc": "us/alloc+free", "ep50-settle": "ms/settling iteration, 10th percentile",
         "ep200-settle": "ms/settling iteration, 10th percentile"}
TITLES = {
    "mlp": "MLP 8x2048, batch 256",
    "launch": "MLP 48x256, batch 32 (launch-bound)",
    "alloc": "allocation loop (torch.empty + del)",
    "ep50": "EP training step, MLP 784-128x50-10, batch 32, 30 settle steps per phase",
    "ep200": "EP training step, MLP 784-128x200-10, batch 32, 30 settle steps per phase",
    "resnet": "ResNet-18-like convnet, batch 32, 224x224, SGD",
    "gpt": "GPT-2-like transformer (12x768, context 512), batch 8, AdamW",
    "ep50-settle": "EP training step, depth 50, each settling iteration timed",
    "ep200-settle": "EP training step, depth 200, each settling iteration timed",
    "libtorch": "LibTorch training program",
}
DEFAULT = "mlp,launch,alloc"


def alloc_loop(count):
    def step():
        for _ in range(count):
            t = torch.empty(4096, device="cuda")
            del t
    return step


def settle_times(step):
    """The 10th percentile and the median of the settling iterations' seconds.

    The GPU machine's CPUs change speed by up to 1.9x from one 100 ms to the next (a fixed
    Python loop on the pinned CPU takes 70-137 ms while the GPU's own times stay within
    0.3%), so a step of one second is timed partly fast and partly slow, and the ratio of two
    configurations' steps spreads by tens of percent. A settling iteration takes 12-53 ms:
    most of them run at one speed, and the lowest decile is the program at the CPU's full
    speed, in each configuration alike. Only the CPU side is timed (no synchronization inside
    the step): the EP steps are bound by it, and it is where tracing costs."""
    return lowest_decile_and_median(step.settle_spans)


def timed(step, warmup, rounds, per_round, step_spans=None):
    """The median of the rounds' seconds per step, and their spread: (max - min) / median.
    With step_spans (a list), each timed step's (start, end) on the CPU goes there too: no
    synchronization per step, so once the queue is full a GPU-bound step takes the GPU's
    time, and a launch-bound one its own launches' (what the program feels either way)."""
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    if hasattr(step, "settle_spans"):
        step.settle_spans.clear()
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(per_round):
            if step_spans is None:
                step()
                continue
            began = time.perf_counter()
            step()
            step_spans.append((began, time.perf_counter()))
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - start) / per_round)
    median = statistics.median(samples)
    return median, (max(samples) - min(samples)) / median


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--recorder", choices=["none", "history", "profiler"], default="none")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", help="comma list of workloads to run (" + ",".join(WORKLOADS) +
                        "; default " + DEFAULT + ")")
    parser.add_argument("--pin", type=int, help="run the main thread alone on this CPU")
    parser.add_argument("--tracker-probe", metavar="LIB:MODE",
                        help="attach tracker_cost_probe.cc's tracker (modes: noop, counters, "
                             "core, core+clock)")
    args = parser.parse_args()
    if args.pin is not None:
        # This thread only (threads started later inherit it: PyTorch's autograd worker runs
        # while this one waits); the tracer's and the collector's threads stay elsewhere.
        os.sched_setaffinity(0, {args.pin})
    torch.manual_seed(0)
    names = (args.only or DEFAULT).split(",")
    workloads = {k: v for k, v in WORKLOADS.items() if k in names}
    if args.tracker_probe:
        import ctypes
        library, _, mode = args.tracker_probe.rpartition(":")
        torch.empty(1, device="cuda")  # the caching allocator exists from here
        probe = ctypes.CDLL(library)
        if probe.cumemtrace_tracker_probe_attach(mode.encode()) != 0:
            sys.exit(f"tracker probe: cannot attach in mode {mode}")
    recorder = None
    if args.recorder == "history":
        torch.cuda.memory._record_memory_history(stacks="python")
    elif args.recorder == "profiler":
        from torch.profiler import ProfilerActivity, profile
        recorder = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                           profile_memory=True)
        recorder.__enter__()
    # The tracer's alternation (torch_bridge.cc), read from the environment it is given in.
    alternate_ms = int(os.environ.get("CUMEMTRACE_BENCH_ALTERNATE_MS", "0") or 0)
    result = {}
    for name, (make, warmup, per_round, scale) in workloads.items():
        step = make()
        settling = hasattr(step, "settle_spans")
        step_spans = [] if alternate_ms and not settling else None
        seconds, spread = timed(step, warmup, args.rounds, per_round, step_spans)
        result[name] = seconds * scale
        result[name + "@spread"] = spread
        if settling:
            # The figure is the settling iteration's; the step's goes to @step.
            result[name + "@step"] = result[name]
            low, median = settle_times(step)
            result[name], result[name + "@median"] = low * scale, median * scale
        if alternate_ms:
            # On against off: the settling iterations where the step has them, else the steps.
            spans = step.settle_spans if settling else step_spans
            for figure, value in alternating_times(spans, alternate_ms).items():
                count = figure.endswith("@count")
                result[name + "@" + figure] = value if count else value * scale
        torch.cuda.empty_cache()
    if recorder is not None:
        recorder.__exit__(None, None, None)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
