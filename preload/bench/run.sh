#!/bin/sh
# Benchmark of libgoset.so (not a test: it prints figures).
#   preload/bench/run.sh [THREADS] [CALLS] [ROUNDS]
# Creation: create+join THREADS threads, mean per thread, for: bare (unpinned), hand-pinned
# round-robin with pthread_attr_setaffinity_np over the allowed CPUs, hand-pinned in the layout
# the shim picks (main on CPU A, every new thread on CPU B), and under the shim with
# GOSET_CPUS=A,B; then all on one CPU (A) hand-pinned and under the shim (GOSET_CPUS=A,A),
# which isolates the shim's own cost from the cost of waking a thread on another CPU.
# Affinity: CALLS sched_setaffinity(0, {own CPU}) calls, mean per call, bare and under the shim.
# Every figure is the best of ROUNDS interleaved rounds (the machine may be shared).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
threads=${1:-10000}
calls=${2:-100000}
rounds=${3:-5}
target=${CARGO_TARGET_DIR:-$here/../../target}
(cd "$here/.." && cargo build --release -q -p goset-preload)
so="$target/release/libgoset.so"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bin=$work/goset-bench
cc -O2 -pthread -o "$bin" "$here/bench.c"

# The first two allowed CPUs (A, B; B = A on a one-CPU mask).
list=$(awk '/^Cpus_allowed_list/ {print $2}' /proc/self/status)
set -- $(echo "$list" | tr ',' '\n' | awk -F- '{ hi = ($2 == "") ? $1 : $2; for (c = $1; c <= hi; c++) print c }' | head -2)
a=$1
b=${2:-$1}

run() { # name, then the command
    name=$1
    shift
    "$@" | awk -v n="$name" '{print n, $4}' >>"$work/results"
}
round=0
while [ "$round" -lt "$rounds" ]; do
    run "bare" "$bin" create "$threads"
    run "hand-pinned(round-robin)" "$bin" pinned "$threads"
    run "hand-pinned(main=$a,threads=$b)" env BENCH_MAIN_CPU="$a" BENCH_CPUS="$b" "$bin" pinned "$threads"
    run "shim(GOSET_CPUS=$a,$b)" env LD_PRELOAD="$so" GOSET_CPUS="$a,$b" "$bin" create "$threads"
    run "shim(GOSET_CPUS=$a,$b)+log" env LD_PRELOAD="$so" GOSET_CPUS="$a,$b" GOSET_LOG=/dev/null "$bin" create "$threads"
    run "hand-pinned(all=$a)" env BENCH_MAIN_CPU="$a" BENCH_CPUS="$a" "$bin" pinned "$threads"
    run "shim(GOSET_CPUS=$a,$a)" env LD_PRELOAD="$so" GOSET_CPUS="$a,$a" "$bin" create "$threads"
    run "setaffinity:bare" "$bin" setaff "$calls"
    run "setaffinity:shim" env LD_PRELOAD="$so" "$bin" setaff "$calls"
    run "setaffinity:shim+log" env LD_PRELOAD="$so" GOSET_LOG=/dev/null "$bin" setaff "$calls"
    round=$((round + 1))
done
echo "best of $rounds rounds; creation: $threads threads, per thread; setaffinity: $calls calls, per call"
awk '{ if (!($1 in best) || $2 < best[$1]) best[$1] = $2; if (!($1 in order)) { order[$1] = ++n; names[n] = $1 } }
     END { for (i = 1; i <= n; i++) printf "  %-36s %9.3f us\n", names[i], best[names[i]] }' "$work/results"
