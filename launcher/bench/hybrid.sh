#!/bin/sh
# A hybrid job's memory bandwidth under three placements (not a test: it prints figures).
#   launcher/bench/hybrid.sh [ROUNDS] [PROCS] [THREADS] [MIB]
# (defaults 3, 2, half the CPUs over PROCS, 256). PROCS processes of a memory-bound OpenMP
# kernel (launcher/tests/programs/triad.c), THREADS threads each, under mpirun:
#   none   mpirun --bind-to none (the scheduler places everything)
#   ompi   mpirun --map-by ppr:<PROCS/nodes>:numa:pe=THREADS --bind-to core (Open MPI's own)
#   goset  goset-run -n PROCS*THREADS --per-process THREADS -- mpirun --bind-to none
# interleaved for ROUNDS rounds; prints each mode's summed MB/s and its ratio to `none` in the
# same round. GOSET_BIN (default target/release) names the directory of goset-run.
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
cc -O2 -fopenmp -o "$work/triad" "$here/../tests/programs/triad.c"
root=""
[ "$(id -u)" = 0 ] && root="--allow-run-as-root"
per_node=$(( (procs + nodes - 1) / nodes ))
mpi="mpirun $root --oversubscribe --mca btl self,vader -np $procs -x OMP_NUM_THREADS=$threads"
sum() { awk '/^triad/ { s += $2 } END { printf "%d", s }'; }
echo "hybrid: $procs processes x $threads threads, $mib MiB arrays; $cpus CPUs, $nodes node(s)"
printf '%-6s %10s %10s %6s %10s %6s\n' round none ompi ratio goset ratio
round=1
while [ "$round" -le "$rounds" ]; do
    n=$(OMP_NUM_THREADS=$threads $mpi --bind-to none "$work/triad" "$mib" | sum)
    o=$(OMP_NUM_THREADS=$threads $mpi --map-by "ppr:$per_node:numa:pe=$threads" --bind-to core \
        "$work/triad" "$mib" | sum)
    g=$("$bin/goset-run" -q -n $((procs * threads)) --per-process "$threads" -- \
        $mpi --bind-to none "$work/triad" "$mib" | sum)
    awk -v r="$round" -v n="$n" -v o="$o" -v g="$g" \
        'BEGIN { printf "%-6s %10d %10d %6.2f %10d %6.2f\n", r, n, o, o / n, g, g / n }'
    round=$((round + 1))
done
