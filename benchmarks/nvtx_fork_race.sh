#!/bin/sh
# Hang rate of the NVTX fork race (nvtx_fork_race.cc), untraced and traced under a private
# daemon, RUNS attempts each with the fork delay swept over 0..DELAY_MAX. Bounded: each
# attempt ends within about 2 s, so the whole takes at most about 4 x RUNS seconds.
#
#   benchmarks/nvtx_fork_race.sh BUILD_DIR [RUNS] [DELAY_MAX]
set -eu
build=$1
runs=${2:-300}
delay_max=${3:-20000}
probe=$build/benchmarks/nvtx_fork_race
cli=$build/bin/cumemtrace
tracer=$build/lib/cumemtrace/libcumemtrace-tracer.so
tmp=$(mktemp -d)
trap 'kill $daemon 2>/dev/null; rm -rf "$tmp"' EXIT
"$cli" daemon --socket "$tmp/sock/collector.sock" --output-dir "$tmp/traces" 2>"$tmp/daemon.log" &
daemon=$!
for _ in $(seq 50); do [ -S "$tmp/sock/collector.sock" ] && break; sleep 0.1; done

attempt() {  # mode, index -> prints 1 when the child hung
  delay=$(( ($2 * 7919) % (delay_max + 1) ))
  if [ "$1" = traced ]; then
    LD_PRELOAD=$tracer CUMEMTRACE_SOCKET=$tmp/sock/collector.sock CUMEMTRACE_QUIET=1 \
      "$probe" "$delay" && status=0 || status=$?
  else
    env -u LD_PRELOAD -u NVTX_INJECTION64_PATH "$probe" "$delay" && status=0 || status=$?
  fi
  [ "$status" = 3 ] && echo 1 || echo 0
}

for mode in untraced traced; do
  hung=0
  start=$(date +%s)
  i=0
  while [ $i -lt "$runs" ]; do
    hung=$(( hung + $(attempt $mode $i) ))
    i=$(( i + 1 ))
  done
  echo "$mode: $hung of $runs children hung ($(( $(date +%s) - start )) s)"
done
