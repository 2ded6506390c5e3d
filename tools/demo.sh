#!/usr/bin/env bash
# Builds cumemtrace and shows it at work: on a machine with a GPU it traces the bundled CUDA
# example (allocations of known sizes in NVTX phases, one failing on purpose) and, when
# python3 imports a torch with CUDA, a small PyTorch training step with the PyTorch bridge
# attached, whose tensor and reserved peaks it prints beside torch's own counters; without a
# GPU it says so and reports a trace recorded on an H100 (a PyTorch training script).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build
# What a run on this machine can record (GPU, CUPTI, torch and its bridge, libdw), and why not.
build/bin/cumemtrace doctor || true
echo
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "cumemtrace demo: no GPU here, so instead of tracing a program, here is the report of a"
  echo "PyTorch training run recorded on an H100 (integration_tests/golden/torch_async.cmtrace):"
  echo
  build/bin/cumemtrace report integration_tests/golden/torch_async.cmtrace
  echo
  echo "cumemtrace demo: PyTorch training step skipped: no GPU here"
  exit 0
fi

nvcc=${CUDACXX:-/usr/local/cuda/bin/nvcc}
demo=build/demo
rm -rf "$demo/cuda_phases-trace" "$demo/torch-trace"  # made by an earlier demo
mkdir -p "$demo"
"$nvcc" -O2 -o "$demo/cuda_phases" integration_tests/gpu/cuda_phases.cu -lcuda
(cd "$demo" && ../bin/cumemtrace run -o cuda_phases-trace -- ./cuda_phases expected.json)
echo

# A PyTorch training step, PyTorch's allocator left as it is: the bridge reads its tensors.
if ! why=$(python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else
                       "its torch " + torch.__version__ + " sees no CUDA GPU")' 2>&1); then
  case "$why" in *ModuleNotFoundError*) why="python3 imports no torch" ;; esac
  echo "cumemtrace demo: PyTorch training step skipped: ${why##*$'\n'}"
  exit 0
fi
echo "cumemtrace demo: a PyTorch training step (integration_tests/gpu/torch_train.py), traced:"
env -u PYTORCH_CUDA_ALLOC_CONF -u CUMEMTRACE_TORCH_BRIDGE build/bin/cumemtrace run --quiet \
  -o "$demo/torch-trace" -- python3 integration_tests/gpu/torch_train.py --steps 3 \
  --depth 4 --width 1024 --stats "$demo/torch-stats.json"
python3 - "$demo/torch-trace/summary.json" "$demo/torch-stats.json" <<'PY'
import json, sys
summary, stats = (json.load(open(path)) for path in sys.argv[1:3])
process = next((p for p in summary["processes"]
                if any(a.endswith("torch_train.py") for a in p["command_line"][:3])),
               summary["processes"][0])
device = next(d for d in process["devices"] if d["index"] == 0)
torch_layers = device.get("torch", {})
attached = process.get("torch_bridge", {}).get("attached", False)
print(f"PyTorch bridge attached: {'yes' if attached else 'no'}")
print(f"{'':24}{'cumemtrace':>16}{'torch':>16}")
for what, ours, theirs in (
        ("tensor peak", "allocated_peak_bytes", "max_memory_allocated"),
        ("reserved peak", "reserved_peak_bytes", "max_memory_reserved")):
    mine = torch_layers.get(ours)
    shown = f"{mine:,} B" if mine is not None else "(not seen)"
    print(f"{what:24}{shown:>16}{stats[theirs]:>14,} B"
          + ("  equal" if mine == stats[theirs] else ""))
PY
