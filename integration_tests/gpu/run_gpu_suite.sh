#!/usr/bin/env bash
# The GPU suite: builds cumemtrace and the GPU programs on a machine with a GPU, runs every
# case under `cumemtrace run`, and prints a pass/fail table. Needs: CUDA toolkit (nvcc,
# CUPTI), cmake, ninja, protoc, RE2, nlohmann-json, libdw (the stacks suite checks named native
# frames, so the build fails without it), PyTorch (python3) with its bundled LibTorch.
# A host without protoc, RE2, nlohmann-json or libdw and without package access: bring them with
# tools/bundle-build-deps.sh and source integration_tests/gpu/use-bundled-deps.sh first.
#
#   integration_tests/gpu/run_gpu_suite.sh [RESULTS_DIR [SUITE...]]
#
# RESULTS_DIR (default: build-gpu/results) receives every case's output folder, the
# programs' own statistics, and the tables. SUITE: main (the pipeline: gpu_suite.py),
# phases (phase analysis: gpu_phases.py), reliability (gpu_reliability.py), fidelity
# (answers on real training scripts: gpu_fidelity.py), bridge (the PyTorch bridge:
# gpu_bridge.py), profiler (the program's own torch.profiler beside cumemtrace:
# gpu_profiler.py), stacks (`run --stacks`: gpu_stacks.py), categories (what the memory is:
# gpu_categories.py), attribution (`run --modules --ops`: gpu_attribution.py), oom (the
# out-of-memory post-mortem: gpu_oom.py), bridge_build (fresh builds without a torch option
# and without a bridge, and the bridge cache: gpu_bridge_build.py), jobs (distributed jobs, 2 GPUs: gpu_jobs.py); default: all but jobs.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
build="$top/build-gpu"
results=${1:-"$build/results"}
shift $(( $# > 0 ? 1 : 0 ))
suites=${*:-main phases reliability fidelity bridge profiler stacks categories attribution oom bridge_build}
mkdir -p "$results"

[ -s "$top/third_party/protobuf/protobuf_3.21.12.orig.tar.gz" ] || "$top/tools/fetch-protobuf-source.sh"
# The PyTorch bridge shim is built against the torch the programs use (tracer/CMakeLists.txt).
torch_dir=$(python3 -c "import os, torch; print(os.path.dirname(torch.__file__))")
cmake -S "$top" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCUMEMTRACE_BUILD_TESTS=OFF \
  -DCUMEMTRACE_BUILD_BENCHMARKS=OFF -DCUMEMTRACE_REQUIRE_LIBDW=ON \
  -DCUMEMTRACE_TORCH_DIR="$torch_dir" >"$results/build.log" 2>&1
cmake --build "$build" >>"$results/build.log" 2>&1
torch_prefix=$(python3 -c "import torch; print(torch.utils.cmake_prefix_path)")
ls "$build"/lib/cumemtrace/libcumemtrace-torch-bridge-*.so
cmake -S "$top/integration_tests/gpu" -B "$build/programs" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$torch_prefix" -DCMAKE_CUDA_COMPILER="${CUDACXX:-/usr/local/cuda/bin/nvcc}" \
  >>"$results/build.log" 2>&1
cmake --build "$build/programs" >>"$results/build.log" 2>&1
echo "built: $build/bin/cumemtrace and $build/programs/{cuda_phases,libtorch_train}"

# Each suite runs, then is checked; all run even when one fails, and the status says.
status=0
for suite in $suites; do
  case "$suite" in
    build) continue ;;  # build only (benchmarks/gpu/overhead.py uses the binaries)
    main) script=gpu_suite.py; dir="$results" ;;
    phases) script=gpu_phases.py; dir="$results" ;;
    reliability) script=gpu_reliability.py; dir="$results/reliability" ;;
    bridge) script=gpu_bridge.py; dir="$results/bridge" ;;  # the PyTorch bridge
    fidelity) script=gpu_fidelity.py; dir="$results/fidelity" ;;
    profiler) script=gpu_profiler.py; dir="$results/profiler" ;;
    stacks) script=gpu_stacks.py; dir="$results/stacks" ;;  # run --stacks
    categories) script=gpu_categories.py; dir="$results/categories" ;;
    oom) script=gpu_oom.py; dir="$results/oom" ;;  # the out-of-memory post-mortem
    attribution) script=gpu_attribution.py; dir="$results/attribution" ;;  # --modules, --ops
    bridge_build) script=gpu_bridge_build.py; dir="$results/bridge_build" ;;  # 2 more builds
    jobs) script=gpu_jobs.py; dir="$results/jobs" ;;  # needs 2 GPUs
    *) echo "unknown suite $suite (main, phases, reliability, fidelity, bridge, profiler, stacks, categories, attribution, oom, bridge_build, jobs)" >&2; exit 2 ;;
  esac
  echo "== suite: $suite"
  python3 "$top/integration_tests/gpu/$script" run --cumemtrace "$build/bin/cumemtrace" \
    --programs "$build/programs" --results "$dir" || status=1
  python3 "$top/integration_tests/gpu/$script" check --results "$dir" || status=1
done
exit $status
