#!/usr/bin/env bash
# Builds cupti_cost_probe and runs it once per CUPTI feature set, interleaved over ROUNDS
# rounds (order rotated each round), one process per run. JSON lines go to OUT_FILE.
#   cupti_costs.sh OUT_FILE [ROUNDS] [FEATURE_SET ...]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$1; rounds=${2:-3}; shift $(( $# >= 2 ? 2 : 1 ))
sets=("$@")
if [ ${#sets[@]} -eq 0 ]; then
  sets=(none sub mem mem,pool kern cbrt cbrt,cbdrv cbrt,work cbrt,cbdrv,work actrt actdrv
        mem,pool,kern mem,pool,kern,cbrt,cbdrv,work mem,pool,kern,actrt mem,pool,kern,actdrv)
fi
cuda=${CUDA_HOME:-/usr/local/cuda}
probe=$(mktemp -d)/cupti_cost_probe
"$cuda/bin/nvcc" -O2 -std=c++17 -arch=native -o "$probe" "$here/cupti_cost_probe.cu" -L"$cuda/lib64" -lcupti -lcuda
: > "$out"
n=${#sets[@]}
for ((r = 0; r < rounds; r++)); do
  for ((i = 0; i < n; i++)); do
    set_=${sets[$(( (i + r) % n ))]}
    LD_LIBRARY_PATH="$cuda/lib64:${LD_LIBRARY_PATH:-}" "$probe" "$set_" | tee -a "$out"
  done
done
