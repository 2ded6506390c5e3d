#!/usr/bin/env bash
# Builds cumemtrace and shows it at work: on a machine with a GPU it traces the bundled CUDA
# example (allocations of known sizes in NVTX phases, one failing on purpose); without one
# it says so and reports a trace recorded on an H100 (a PyTorch training script).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build
# What a run on this machine can record (GPU, CUPTI, torch and its bridge, libdw), and why not.
build/bin/cumemtrace doctor || true
echo
if nvidia-smi -L >/dev/null 2>&1; then
  nvcc=${CUDACXX:-/usr/local/cuda/bin/nvcc}
  mkdir -p build/demo
  "$nvcc" -O2 -o build/demo/cuda_phases integration_tests/gpu/cuda_phases.cu -lcuda
  cd build/demo
  exec ../bin/cumemtrace run -- ./cuda_phases expected.json
fi
echo "cumemtrace demo: no GPU here, so instead of tracing a program, here is the report of a"
echo "PyTorch training run recorded on an H100 (integration_tests/golden/torch_async.cmtrace):"
echo
exec build/bin/cumemtrace report integration_tests/golden/torch_async.cmtrace
