#!/bin/sh
# Hang rate of the NVTX fork race (nvtx_fork_race.cc) under a private daemon, RUNS attempts
# per mode and round with the fork's offset from the thread's first NVTX call swept evenly
# over -SPAN/2..+SPAN/2 nanoseconds (default SPAN 40,000); the modes take turns, ROUNDS
# times, so that a change in the machine's load falls on all of them alike. Bounded: each
# attempt ends within about 1 s.
#
#   benchmarks/nvtx_fork_race.sh BUILD_DIR [RUNS] [SPAN] [ROUNDS]
#
# MODES (default "untraced traced"), any of:
#   untraced  no tracer
#   traced    LD_PRELOAD, NVTX_INJECTION64_PATH and CUDA_INJECTION64_PATH all naming the
#             tracer by its absolute path, as `cumemtrace run` sets them
#   relative  LD_PRELOAD naming the tracer by a relative path, nothing else set (the
#             tracer's constructor sets the injection variables to the path it resolves)
#   nvtx      only NVTX_INJECTION64_PATH: NVTX loads the tracer at the first NVTX call
# TRACER overrides the tracer library (to compare two builds of it).
set -eu
build=$1
runs=${2:-300}
span=${3:-40000}
rounds=${4:-1}
modes=${MODES:-untraced traced}
probe=$build/benchmarks/nvtx_fork_race
cli=$build/bin/cumemtrace
tracer=${TRACER:-$build/lib/cumemtrace/libcumemtrace-tracer.so}
absolute=$(cd "$(dirname "$tracer")" && pwd)/$(basename "$tracer")
tmp=$(mktemp -d)
trap 'kill $daemon 2>/dev/null; rm -rf "$tmp"' EXIT
"$cli" daemon --socket "$tmp/sock/collector.sock" --output-dir "$tmp/traces" 2>"$tmp/daemon.log" &
daemon=$!
for _ in $(seq 50); do [ -S "$tmp/sock/collector.sock" ] && break; sleep 0.1; done

attempt() {  # mode, index -> prints 1 when the child hung
  # 7919 is prime: the first SPAN+1 attempts each take a different offset.
  delay=$(( ($2 * 7919) % (span + 1) - span / 2 ))
  status=0
  case $1 in
    untraced)
      env -u LD_PRELOAD -u NVTX_INJECTION64_PATH -u CUDA_INJECTION64_PATH \
        "$probe" "$delay" || status=$? ;;
    traced)
      LD_PRELOAD=$absolute NVTX_INJECTION64_PATH=$absolute CUDA_INJECTION64_PATH=$absolute \
        CUMEMTRACE_SOCKET=$tmp/sock/collector.sock CUMEMTRACE_QUIET=1 \
        "$probe" "$delay" || status=$? ;;
    relative)
      env -u NVTX_INJECTION64_PATH -u CUDA_INJECTION64_PATH LD_PRELOAD=$tracer \
        CUMEMTRACE_SOCKET=$tmp/sock/collector.sock CUMEMTRACE_QUIET=1 \
        "$probe" "$delay" || status=$? ;;
    nvtx)
      env -u LD_PRELOAD -u CUDA_INJECTION64_PATH NVTX_INJECTION64_PATH=$absolute \
        CUMEMTRACE_SOCKET=$tmp/sock/collector.sock CUMEMTRACE_QUIET=1 \
        "$probe" "$delay" || status=$? ;;
    *) echo "unknown mode $1" >&2; exit 2 ;;
  esac
  [ "$status" = 3 ] && echo 1 || echo 0
}

round=1
while [ $round -le "$rounds" ]; do
  for mode in $modes; do
    hung=0
    start=$(date +%s)
    i=0
    while [ $i -lt "$runs" ]; do
      hung=$(( hung + $(attempt "$mode" $i) ))
      i=$(( i + 1 ))
    done
    echo "round $round $mode: $hung of $runs children hung ($(( $(date +%s) - start )) s)"
  done
  round=$(( round + 1 ))
done
