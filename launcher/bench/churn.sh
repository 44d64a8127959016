#!/bin/sh
# The housekeeper's cost under churn (not a test: it prints figures).
#   launcher/bench/churn.sh [ROUNDS] [SPAWNERS] [SLEEPERS] [SECS] [INTERVAL_MS]
# (defaults 3, 20, 3000, 8, 10). Runs shim-tests/programs/spawners.c (SPAWNERS threads
# creating and joining short threads for SECS seconds beside SLEEPERS sleeping threads)
# under taskset on the first two allowed CPUs, under the shim alone (GOSET_CPUS), and under
# goset-run -n 2 --interval INTERVAL_MS, interleaved for ROUNDS rounds; prints the threads created in each run, their
# ratio to taskset in the same round, the housekeeper's CPU (percent of one CPU), the polls
# it made and its CPU time per poll. On a machine with few CPUs the housekeeper shares one
# with the task: with many spawners it gets less CPU and makes fewer polls, so compare the
# time per poll too (or run with SPAWNERS=1).
# GOSET_BIN (default target/release) names the directory of goset-run and libgoset.so, so
# that two builds can be compared on the same machine.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
rounds=${1:-3}
spawners=${2:-20}
sleepers=${3:-3000}
secs=${4:-8}
interval=${5:-10}
bin=${GOSET_BIN:-$here/../../target/release}
if [ -z "${GOSET_BIN:-}" ]; then
    (cd "$here/../.." && cargo build --release -q --workspace)
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cc -O2 -pthread -o "$work/spawners" "$here/../../shim-tests/programs/spawners.c"
list=$(awk '/^Cpus_allowed_list/ {print $2}' /proc/self/status)
cpus=$(echo "$list" | tr ',' '\n' | awk -F- '{ hi = ($2 == "") ? $1 : $2; for (c = $1; c <= hi; c++) print c }' | head -2 | paste -sd, -)
created() { awk '/^created/ {print $2}'; }
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
echo "churn: $spawners spawners, $sleepers sleepers, ${secs} s; CPUs $cpus; goset-run --interval $interval"
printf '%-6s %10s %10s %6s %10s %6s %7s %6s %8s\n' round taskset shim ratio goset-run ratio "hk cpu" polls "ms/poll"
round=1
while [ "$round" -le "$rounds" ]; do
    t=$(taskset -c "$cpus" "$work/spawners" "$spawners" "$sleepers" "$secs" | created)
    s=$(env LD_PRELOAD="$bin/libgoset.so" GOSET_CPUS="$cpus" "$work/spawners" "$spawners" "$sleepers" "$secs" | created)
    g=$("$bin/goset-run" -n 2 --quiet --sample 0 --interval "$interval" --json "$work/r.json" -- \
        "$work/spawners" "$spawners" "$sleepers" "$secs" | created)
    hk=$(python3 -c 'import json,sys; t = json.load(open(sys.argv[1]))["telemetry"]; h = t["housekeeper"]; print("%.1f%% %d %.2f" % (h["cpu_pct"], t["polls"], 1000 * h["cpu_s"] / max(t["polls"], 1)))' "$work/r.json")
    set -- $hk
    awk -v r="$round" -v t="$t" -v s="$s" -v g="$g" -v hk="$1" -v polls="$2" -v per="$3" \
        'BEGIN { printf "%-6s %10d %10d %6.2f %10d %6.2f %7s %6d %8s\n", r, t, s, s / t, g, g / t, hk, polls, per }'
    round=$((round + 1))
done
