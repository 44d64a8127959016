#!/bin/sh
# A hybrid job's memory bandwidth under three placements (not a test: it prints figures).
#   launcher/bench/hybrid.sh [ROUNDS] [PROCS] [THREADS] [MIB]
# (defaults 3, 2, half the CPUs over PROCS, 256). PROCS processes of a memory-bound OpenMP
# kernel (shim-tests/programs/triad.c), THREADS threads each, started by mpirun:
#   none   mpirun --bind-to none (the scheduler places everything)
#   ompi   mpirun --map-by ppr:<PROCS/nodes>:numa:pe=THREADS --bind-to core (Open MPI's own)
#   goset  goset-run -n PROCS*THREADS --per-process THREADS -- mpirun --bind-to none
# Without mpirun (a QEMU guest: launcher/bench/hybrid-guest.sh), or with HYBRID_LAUNCH=sh, a
# shell starts the processes, and `ompi` becomes `bound`: each process under `taskset -c` to
# its share of one node's CPUs, the nodes filled in order, as ppr:<PROCS/nodes>:numa binds.
# The modes interleave for ROUNDS rounds; it prints each mode's summed MB/s and its ratio to
# `none` in the same round. GOSET_BIN (default target/release) names the directory of
# goset-run; TRIAD, a built triad (default: built here with cc -fopenmp).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cpus=$(nproc)
nodes=$(ls -d /sys/devices/system/node/node[0-9]* 2>/dev/null | wc -l)
[ "$nodes" -ge 1 ] || nodes=1
rounds=${1:-3}
procs=${2:-2}
threads=${3:-$((cpus / 2 / procs > 0 ? cpus / 2 / procs : 1))}
mib=${4:-256}
bin=${GOSET_BIN:-$here/../../target/release}
if [ -z "${GOSET_BIN:-}" ]; then
    (cd "$here/../.." && cargo build --release -q --workspace)
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
triad=${TRIAD:-$work/triad}
[ -n "${TRIAD:-}" ] || cc -O2 -fopenmp -o "$triad" "$here/../../shim-tests/programs/triad.c"
per_node=$(( (procs + nodes - 1) / nodes ))
sum() { awk '/^triad/ { s += $2 } END { printf "%d", s }'; }

# The i-th of k equal shares of a cpulist ("0-3,8-11"), 0-based.
share() {
    echo "$1" | awk -v i="$2" -v k="$3" -F, '{
        n = 0
        for (f = 1; f <= NF; f++) {
            hi = (split($f, r, "-") == 2) ? r[2] : r[1]
            for (c = r[1]; c <= hi; c++) cpu[n++] = c
        }
        per = int(n / k); out = ""
        for (c = i * per; c < (i + 1) * per; c++) out = out (out == "" ? "" : ",") cpu[c]
        print out
    }'
}

if [ "${HYBRID_LAUNCH:-}" != sh ] && command -v mpirun >/dev/null 2>&1; then
    bound=ompi
    root=""
    [ "$(id -u)" = 0 ] && root="--allow-run-as-root"
    mpi="mpirun $root --oversubscribe --mca btl self,vader -np $procs -x OMP_NUM_THREADS=$threads"
    run_none() { OMP_NUM_THREADS=$threads $mpi --bind-to none "$triad" "$mib"; }
    run_bound() {
        OMP_NUM_THREADS=$threads $mpi --map-by "ppr:$per_node:numa:pe=$threads" --bind-to core \
            "$triad" "$mib"
    }
    run_goset() {
        "$bin/goset-run" -q -n $((procs * threads)) --per-process "$threads" -- \
            $mpi --bind-to none "$triad" "$mib"
    }
else
    bound=bound
    # One script per mode: PROCS processes started together, each after its prefix.
    {
        echo 'OMP_NUM_THREADS='"$threads"'; export OMP_NUM_THREADS'
        i=0
        while [ "$i" -lt "$procs" ]; do echo "\"$triad\" $mib &"; i=$((i + 1)); done
        echo wait
    } >"$work/none.sh"
    {
        echo 'OMP_NUM_THREADS='"$threads"'; export OMP_NUM_THREADS'
        i=0
        while [ "$i" -lt "$procs" ]; do
            node=$((i / per_node))
            list=$(cat "/sys/devices/system/node/node$node/cpulist" 2>/dev/null || echo "0-$((cpus - 1))")
            echo "taskset -c $(share "$list" $((i % per_node)) "$per_node") \"$triad\" $mib &"
            i=$((i + 1))
        done
        echo wait
    } >"$work/bound.sh"
    run_none() { sh "$work/none.sh"; }
    run_bound() { sh "$work/bound.sh"; }
    run_goset() {
        "$bin/goset-run" -q -n $((procs * threads)) --per-process "$threads" -- sh "$work/none.sh"
    }
fi

echo "hybrid: $procs processes x $threads threads, $mib MiB arrays; $cpus CPUs, $nodes node(s)"
printf '%-6s %10s %10s %6s %10s %6s\n' round none "$bound" ratio goset ratio
round=1
while [ "$round" -le "$rounds" ]; do
    n=$(run_none | sum)
    o=$(run_bound | sum)
    g=$(run_goset | sum)
    awk -v r="$round" -v n="$n" -v o="$o" -v g="$g" \
        'BEGIN { printf "%-6s %10d %10d %6.2f %10d %6.2f\n", r, n, o, o / n, g, g / n }'
    round=$((round + 1))
done
