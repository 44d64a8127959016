#!/usr/bin/env bash
# `perf bench sched pipe`: two processes passing a token over a pair of pipes, fixed loops
# (LOOPS, default 50000 per second of DURATION, 2 s: 100000). A short run first warms up (not
# counted); the timed run's ops/sec is printed as throughput, the loop count as the checksum.
# PERF (default: perf on PATH). --check: exit 0 when perf bench works, else skip line, exit 3.
perf=${PERF:-perf}
if ! "$perf" bench sched pipe -l 10 >/dev/null 2>&1; then
    echo "skip: perf: '$perf bench sched pipe' does not run"
    exit 3
fi
[ "${1:-}" = --check ] && { echo "ok: $("$perf" --version 2>/dev/null | sed "s/ version//")"; exit 0; }
loops=${LOOPS:-$(awk -v d="${DURATION:-2}" 'BEGIN { printf "%d", 50000 * d }')}
"$perf" bench sched pipe -l $((loops / 10 + 1)) >/dev/null 2>&1
out=$("$perf" bench sched pipe -l "$loops" 2>&1) || { echo "$out" >&2; exit 1; }
rate=$(echo "$out" | awk '/ops\/sec/ { print $1 }')
[ -n "$rate" ] || { echo "no ops/sec in: $out" >&2; exit 1; }
echo "throughput: $rate ops/s"
echo "checksum: $loops"
