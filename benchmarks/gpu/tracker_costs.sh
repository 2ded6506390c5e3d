#!/usr/bin/env bash
# Splits the PyTorch bridge's cost per tensor: builds tracker_cost_probe.cc against the torch
# that python3 imports, says what the clock costs, then runs overhead.py with the probe's
# configurations beside the ones asked for.
#   tracker_costs.sh OVERHEAD_ARGS...
# e.g. tracker_costs.sh --cumemtrace build-gpu/bin/cumemtrace --libtorch-train X --rounds 5 \
#        --workloads alloc --configs 'untraced|cumemtrace|untraced, tracker probe: noop|...'
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
torch_dir=$(python3 -c "import os, torch; print(os.path.dirname(torch.__file__))")
cuda=${CUDA_HOME:-/usr/local/cuda}
probe=$(mktemp -d)/libtracker_cost_probe.so
g++ -O2 -std=c++17 -shared -fPIC -o "$probe" "$here/tracker_cost_probe.cc" -I"$top" \
  -isystem "$torch_dir/include" -isystem "$cuda/include" \
  -L"$torch_dir/lib" -lc10_cuda -lc10 -Wl,-rpath,"$torch_dir/lib"
echo "clock source: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null || echo unknown)"
python3 -c "import ctypes; p = ctypes.CDLL('$probe'); p.cumemtrace_tracker_probe_clock_ns.restype = ctypes.c_double; print(f'clock_gettime(CLOCK_MONOTONIC): {p.cumemtrace_tracker_probe_clock_ns():.1f} ns per call')"
python3 "$here/overhead.py" --tracker-probe "$probe" "$@"
