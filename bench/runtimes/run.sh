#!/usr/bin/env bash
# Runtimes under goset: each workload of bench/runtimes/ under goset-bench, modes mask (goset-run
# --placement mask), goset (goset-run) and shim (LD_PRELOAD=libgoset.so by hand), all on the same
# N CPUs; a markdown table of each mode's median throughput over mask's, and the machine.
#
#   bench/runtimes/run.sh [-n N] [--runs R] [--out DIR] [--python PY] [--only a,b]
#                         [--duration S] [--max-time S] [--share] [--goset-arg ARG]... [--seed S]
#
#   -n N          task CPUs (default: half the online CPUs, at most 8: 8 on 16 CPUs, 1 on 2)
#   --runs R      counted runs per mode (default 3)
#   --out DIR     where the JSON, text and table go (default target/bench-runtimes/<time>)
#   --python PY   the Python of the Python workloads (default target/pyvenv/bin/python if there,
#                 else python3)
#   --only LIST   only these workloads (names below), comma-separated
#   --duration S  each workload's timed loop, seconds (DURATION, default 1.5; warm-up WARMUP 0.3)
#   --max-time S  skip a workload whose planned time would end past S seconds from the start
#   --share       goset-run --share (take CPUs that other goset runs booked: a shared machine)
#   --goset-arg A one more goset-run argument, for the selection and every goset/mask run
#   --seed S      goset-bench's seed (the order of the modes in each round)
#
# Workloads (each skipped, with a line saying why, when its runtime or tool is missing):
#   numpy torch numba sklearn jax onnx opencv java redis perf
# goset binaries: $GOSET_BIN (default target/release: goset-run, goset-bench, libgoset.so; for a
# machine the build is copied to, a folder of just those three, stripped, is about 6.5 MB).
# Planned time at -n 8 --runs 3 with all 10 workloads: about 5.5 min (printed at the start).
#
# The N CPUs are picked once (goset-run -n N --dry-run) and passed to every goset-bench as
# --include, so mask, goset and shim runs use the same CPUs in the same slot order. Each
# workload prints `throughput: X ops/s` and a `checksum:` that must be equal in every run;
# goset-bench reads them with --match (--warmup 0: every workload warms up inside its own run).
# Every run has a timeout; every goset-bench is bounded too, and is ended (with its run's process
# group) when this script ends or is interrupted. Exits 0 unless the setup itself fails.
set -u

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${GOSET_BIN:-$root/target/release}

online=$(nproc --all 2>/dev/null || getconf _NPROCESSORS_ONLN)
n=$((online / 2))
[ "$n" -gt 8 ] && n=8
[ "$n" -lt 1 ] && n=1
runs=3
out=
py=
only=
duration=1.5
warmup=0.3
max_time=0
seed=
goset_args=()

usage() { sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
    case $1 in
        -n) n=$2; shift 2 ;;
        --runs) runs=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --python) py=$2; shift 2 ;;
        --only) only=$2; shift 2 ;;
        --duration) duration=$2; shift 2 ;;
        --max-time) max_time=$2; shift 2 ;;
        --share) goset_args+=(--share); shift ;;
        --goset-arg) goset_args+=("$2"); shift 2 ;;
        --goset-arg=*) goset_args+=("${1#--goset-arg=}"); shift ;;
        --seed) seed=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done

if [ -z "$py" ]; then
    if [ -x "$root/target/pyvenv/bin/python" ]; then py=$root/target/pyvenv/bin/python; else py=python3; fi
fi
pyjson=$(command -v python3 || echo "$py")   # reads JSON and writes the table
out=${out:-$root/target/bench-runtimes/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out" || exit 2
out=$(cd "$out" && pwd)
for f in goset-run goset-bench libgoset.so; do
    [ -e "$bin/$f" ] || { echo "run.sh: no $bin/$f (cargo build --release --workspace, or set GOSET_BIN)" >&2; exit 2; }
done

# name | label | startup estimate (s: imports, data, JIT; for the plan only) | command
workloads=(
    "numpy|numpy/OpenBLAS fp32 matmul|0.7|$py $here/numpy_matmul.py"
    "torch|PyTorch CPU fp32 matmul|2.5|$py $here/torch_matmul.py"
    "numba|numba parallel=True prange|1.5|$py $here/numba_prange.py"
    "sklearn|scikit-learn KMeans|1.5|$py $here/sklearn_kmeans.py"
    "jax|JAX CPU matmul|2.5|$py $here/jax_matmul.py"
    "onnx|ONNX Runtime MatMul, $n intra-op threads|1|$py $here/onnx_matmul.py"
    "opencv|OpenCV GaussianBlur+resize|1|$py $here/opencv_blur.py"
    "java|OpenJDK ForkJoin + ParallelGC|1.5|$here/java_forkjoin.sh"
    "redis|redis-server --io-threads 4 (SET+GET)|1.5|$here/redis.sh"
    "perf|perf bench sched pipe|0.3|$here/perf_pipe.sh"
)

# --- cleanup: whatever this script started ends with it ---
bench_pid=
client_pid=
cleanup() {
    [ -n "$bench_pid" ] && kill -TERM "$bench_pid" 2>/dev/null && wait "$bench_pid" 2>/dev/null
    [ -n "$client_pid" ] && kill -TERM "$client_pid" 2>/dev/null && wait "$client_pid" 2>/dev/null
    bench_pid= client_pid=
}
trap cleanup EXIT
trap 'echo "run.sh: interrupted" >&2; exit 130' INT TERM HUP

start=$(date +%s)
export DURATION=$duration WARMUP=$warmup

# --- the CPUs, picked once ---
pick() {
    "$bin/goset-run" -n "$n" "${goset_args[@]}" --dry-run --json - 2>"$out/selection.err" |
        tee "$out/selection.json" |
        "$pyjson" -c 'import json,sys; print(",".join(map(str, json.load(sys.stdin)["selection"]["task_cpus"])))' 2>/dev/null
}
cpus=$(pick)
if [ -z "$cpus" ] && ! printf '%s\n' "${goset_args[@]}" | grep -qx -- --share; then
    echo "run.sh: goset-run -n $n --dry-run failed ($(tail -1 "$out/selection.err")); again with --share" >&2
    goset_args+=(--share)
    cpus=$(pick)
fi
[ -n "$cpus" ] || { echo "run.sh: no selection: $(tail -3 "$out/selection.err")" >&2; exit 2; }
[ "$(echo "$cpus" | tr ',' '\n' | wc -l)" -eq "$n" ] || { echo "run.sh: selection '$cpus' is not $n CPUs" >&2; exit 2; }
export GOSET_BENCH_CPUS=$cpus

# --- which workloads run ---
for want in ${only//,/ }; do
    printf '%s\n' "${workloads[@]}" | grep -q "^$want|" || echo "run.sh: --only: no workload '$want'" >&2
done
selected=()
labels=()
for w in "${workloads[@]}"; do
    IFS='|' read -r name label est cmd <<<"$w"
    if [ -n "$only" ] && ! echo ",$only," | grep -q ",$name,"; then continue; fi
    # shellcheck disable=SC2086
    check=$(timeout 120 $cmd --check 2>&1 </dev/null | tail -1)
    case $check in
        ok:*) selected+=("$w"); labels+=("$name::$label::${check#ok: }") ;;
        *) echo "skip $name: ${check:-no answer to --check}" | tee -a "$out/skipped.txt" >&2 ;;
    esac
done
modes=3
plan=0
for w in "${selected[@]}"; do
    IFS='|' read -r name label est cmd <<<"$w"
    plan=$(awk -v p="$plan" -v r="$runs" -v m="$modes" -v e="$est" -v d="$duration" -v w="$warmup" \
        'BEGIN { printf "%.0f", p + r * m * (e + d + w + 0.5) }')
done
echo "run.sh: -n $n on CPUs $cpus of $online, $runs runs x $modes modes (mask,goset,shim), DURATION ${duration}s," \
    "${#selected[@]} workloads: $(for w in "${selected[@]}"; do printf '%s ' "${w%%|*}"; done)" >&2
echo "run.sh: planned time ~${plan}s ($(awk -v p="$plan" 'BEGIN { printf "%.1f", p / 60 }') min);" \
    "each run times out after its plan x 10 (at least 60 s), each workload after 3x its plan + 60 s; results in $out" >&2

# --- the redis client, outside every run ---
if printf '%s\n' "${selected[@]}" | grep -q '^redis|'; then
    others=$("$pyjson" - "$cpus" <<'PY'
import sys
def parse(s):
    out = set()
    for part in filter(None, s.strip().split(",")):
        a, _, b = part.partition("-")
        out.update(range(int(a), int(b or a) + 1))
    return out
print(",".join(map(str, sorted(parse(open("/sys/devices/system/cpu/online").read()) - parse(sys.argv[1])))))
PY
)
    mkdir -p "$out/redis-client"
    pin=()
    [ -n "$others" ] && pin=(taskset -c "$others")
    env -u LD_PRELOAD -u GOSET_CPUS -u GOSET_PLAN "${pin[@]}" "$here/redis_client.sh" "$out/redis-client" $$ \
        </dev/null >"$out/redis-client/log" 2>&1 &
    client_pid=$!
    for _ in $(seq 50); do [ -p "$out/redis-client/req" ] && break; sleep 0.1; done
    export REDIS_CLIENT_DIR=$out/redis-client
    # redis-benchmark's threads: its CPUs, at most 4.
    ct=$(echo "${others:-$cpus}" | tr ',' '\n' | wc -l)
    export CLIENT_THREADS=$((ct > 4 ? 4 : ct))
    echo "run.sh: redis-benchmark (${CLIENT_THREADS} threads) runs outside the task on CPUs ${others:-all (none left outside the task: it shares them)}" >&2
fi

# --- the experiments ---
gb_args=(-n "$n" --include "$cpus" --modes mask,goset,shim --runs "$runs" --warmup 0
    --match '^(throughput|checksum|pool threads|process threads)$')
for a in "${goset_args[@]}"; do gb_args+=("--goset-arg=$a"); done
[ -n "$seed" ] && gb_args+=(--seed "$seed")
for w in "${selected[@]}"; do
    IFS='|' read -r name label est cmd <<<"$w"
    per_run=$(awk -v e="$est" -v d="$duration" -v w="$warmup" 'BEGIN { t = 10 * (e + d + w + 0.5); printf "%.0f", t < 60 ? 60 : t }')
    cap=$(awk -v r="$runs" -v m="$modes" -v e="$est" -v d="$duration" -v w="$warmup" \
        'BEGIN { printf "%.0f", 3 * r * m * (e + d + w + 0.5) + 60 }')
    now=$(($(date +%s) - start))
    if [ "$max_time" != 0 ]; then
        mine=$(awk -v r="$runs" -v m="$modes" -v e="$est" -v d="$duration" -v w="$warmup" 'BEGIN { printf "%.0f", r * m * (e + d + w + 0.5) }')
        if [ $((now + mine)) -gt "${max_time%.*}" ]; then
            echo "skip $name: --max-time $max_time would pass (at ${now}s, ~${mine}s more)" | tee -a "$out/skipped.txt" >&2
            continue
        fi
    fi
    echo "run.sh: [${now}s] $name ($label)" >&2
    extra=()
    [ "$name" = onnx ] && extra=(env "ORT_THREADS=$n")
    # shellcheck disable=SC2086
    timeout -k 10 "$cap" "$bin/goset-bench" "${gb_args[@]}" --timeout "${per_run}s" \
        --json "$out/$name.json" -- "${extra[@]}" $cmd >"$out/$name.txt" 2>"$out/$name.err" </dev/null &
    bench_pid=$!
    wait "$bench_pid"
    rc=$?
    bench_pid=
    [ "$rc" -eq 0 ] || echo "run.sh: $name: goset-bench exit $rc (see $out/$name.err)" >&2
done
cleanup

# --- the table and the machine ---
lscpu_field() { LC_ALL=C lscpu 2>/dev/null | sed -n "s/^$1:[[:space:]]*//p" | head -1; }
{
    echo "# Runtimes under goset: throughput against a plain mask on the same CPUs"
    echo
    echo "Machine: $(lscpu_field 'Model name'), $online CPUs ($(lscpu_field 'Socket(s)') sockets," \
        "$(lscpu_field 'Core(s) per socket') cores per socket, $(lscpu_field 'Thread(s) per core') threads per core)," \
        "$(lscpu_field 'NUMA node(s)') NUMA node(s), $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo) memory," \
        "hypervisor: $(lscpu_field 'Hypervisor vendor' | sed 's/^$/none/'); kernel $(uname -r);" \
        "$(date -u '+%Y-%m-%d %H:%M UTC'); goset $(git -C "$root" rev-parse --short HEAD 2>/dev/null)$(git -C "$root" diff --quiet HEAD -- preload launcher plan 2>/dev/null || echo ' (modified)')."
    echo
    echo "Run: \`bench/runtimes/run.sh -n $n --runs $runs${only:+ --only $only} --duration $duration${goset_args[*]:+ (goset-run ${goset_args[*]})}\`:" \
        "goset-bench -n $n --include $cpus --modes mask,goset,shim --runs $runs on each workload;" \
        "DURATION ${duration} s timed after WARMUP ${warmup} s in each run. Ratios are medians of throughput over mask's median (higher is better)."
    echo
    "$pyjson" "$here/summarize.py" "$out" "$cpus" "${labels[@]}"
    if [ -s "$out/skipped.txt" ]; then
        echo
        echo "Skipped:"
        sed 's/^/- /' "$out/skipped.txt"
    fi
} >"$out/runtimes.md"
echo
cat "$out/runtimes.md"
echo
echo "run.sh: done in $(($(date +%s) - start)) s; $out/runtimes.md" >&2
exit 0
