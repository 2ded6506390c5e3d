#!/usr/bin/env bash
# The GPU suite: builds cumemtrace and the GPU programs on a machine with a GPU, runs every
# case under `cumemtrace run`, and prints a pass/fail table. Needs: CUDA toolkit (nvcc,
# CUPTI), cmake, ninja, protoc, PyTorch (python3) with its bundled LibTorch.
#
#   integration_tests/gpu/run_gpu_suite.sh [RESULTS_DIR]
#
# RESULTS_DIR (default: build-gpu/results) receives every case's output folder, the
# programs' own statistics, and suite.json with the table.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
build="$top/build-gpu"
results=${1:-"$build/results"}
mkdir -p "$results"

[ -s "$top/third_party/protobuf/protobuf_3.21.12.orig.tar.gz" ] || "$top/tools/fetch-protobuf-source.sh"
cmake -S "$top" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCUMEMTRACE_BUILD_TESTS=OFF \
  >"$results/build.log" 2>&1
cmake --build "$build" >>"$results/build.log" 2>&1
torch_prefix=$(python3 -c "import torch; print(torch.utils.cmake_prefix_path)")
cmake -S "$top/integration_tests/gpu" -B "$build/programs" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$torch_prefix" -DCMAKE_CUDA_COMPILER="${CUDACXX:-/usr/local/cuda/bin/nvcc}" \
  >>"$results/build.log" 2>&1
cmake --build "$build/programs" >>"$results/build.log" 2>&1
echo "built: $build/bin/cumemtrace and $build/programs/{cuda_phases,libtorch_train}"

python3 "$top/integration_tests/gpu/gpu_suite.py" run --cumemtrace "$build/bin/cumemtrace" \
  --programs "$build/programs" --results "$results"
python3 "$top/integration_tests/gpu/gpu_suite.py" check --results "$results"
