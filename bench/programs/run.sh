#!/usr/bin/env bash
# Programs made of processes under goset: wall time of each program below run three ways on the
# same CPUs, `taskset -c CPUS`, `goset-run -n N --sample 0 -q --include CPUS` and the shim by hand
# (`LD_PRELOAD=libgoset.so GOSET_CPUS=CPUS`); a markdown table of each way's median over taskset's.
#
#   bench/programs/run.sh [--cpus LIST] [--runs R] [--scale S] [--only a,b] [--out DIR] [--share]
#
#   --cpus LIST   the CPUs, a cpulist of 2 (default: the first two this shell may use)
#   --runs R      timed runs per way, alternating (default 3; each program has one untimed
#                 taskset run first, to warm caches and ccache)
#   --scale S     the work of each job (bench/programs/inputs.sh; default 10: about a second)
#   --only LIST   only these programs (names below), comma-separated
#   --out DIR     where times.tsv, the inputs and programs.md go (default
#                 target/bench-programs/<time>)
#   --share       goset-run --share (take CPUs other goset runs booked: a shared machine)
#
# Programs (each skipped, with a line saying why, when its tool is missing):
#   make ccache_mold ninja xargs pool_fork pool_forkserver pool_spawn joblib hyperfine
#   xz_pipe unxz_pipe faketime
# goset binaries: $GOSET_BIN (default target/release: goset-run and libgoset.so). Inputs are
# generated (bench/programs/inputs.sh and a 24 MB text), nothing is downloaded. At the defaults,
# 4 minutes on a 2-CPU machine under a load of 5, 13 under a load of 11. Every run has a timeout (`timeout -k`); a run
# that fails or times out is recorded and left out of the medians.
set -u

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${GOSET_BIN:-$root/target/release}
cpus=
runs=3
scale=10
only=
out=
share=()

usage() { sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
die() { echo "run.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case $1 in
        --cpus) cpus=${2-}; shift 2 || die "--cpus needs a cpulist" ;;
        --runs) runs=${2-}; shift 2 || die "--runs needs a number" ;;
        --scale) scale=${2-}; shift 2 || die "--scale needs a number" ;;
        --only) only=${2-}; shift 2 || die "--only needs names" ;;
        --out) out=${2-}; shift 2 || die "--out needs a directory" ;;
        --share) share=(--share); shift ;;
        -h | --help) usage; exit 0 ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done
case $runs in '' | *[!0-9]* | 0) die "--runs '$runs': a positive integer is accepted" ;; esac
case $scale in '' | *[!0-9]* | 0) die "--scale '$scale': a positive integer is accepted" ;; esac
if [ -z "$cpus" ]; then
    cpus=$(taskset -cp $$ | sed 's/.*: //' | tr ',' '\n' | awk -F- '{ for (c = $1; c <= ($2 == "" ? $1 : $2); c++) print c }' | head -2 | paste -sd,)
fi
case $cpus in *[!0-9,-]* | '') die "--cpus '$cpus': a cpulist such as 0,1 is accepted" ;; esac
n=$(echo "$cpus" | tr ',' '\n' | awk -F- '{ n += ($2 == "" ? 1 : $2 - $1 + 1) } END { print n }')
[ "$n" -ge 2 ] || die "--cpus '$cpus' holds $n CPU; 2 or more are needed"
for f in goset-run libgoset.so; do
    [ -e "$bin/$f" ] || die "no $bin/$f (cargo build --release --workspace, or set GOSET_BIN)"
done
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3 || echo python3)
out=${out:-$root/target/bench-programs/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out" || die "cannot make $out"
out=$(cd "$out" && pwd)
work=$out/work
start=$(date +%s)

# --- inputs ---
"$here/inputs.sh" "$work" "$scale" || die "inputs.sh failed"
cc -O2 -pthread -o "$work/spin2" "$work/spin2.c" || die "cannot build spin2"
awk 'BEGIN { srand(7); split("the of goset cpu thread slot mask pin run task core cache node job make", w, " ");
             while (n < 24 * 1048576) { s = w[int(rand() * 15) + 1] " " int(rand() * 1000) "\n"; printf "%s", s; n += length(s) } }' \
    >"$work/text"
xz -T2 -1 -c "$work/text" >"$work/text.xz" 2>/dev/null || rm -f "$work/text.xz"
faketime_lib=$(ls /usr/lib/*/faketime/libfaketime.so.1 /usr/lib/faketime/libfaketime.so.1 2>/dev/null | head -1)

has() { command -v "$1" >/dev/null 2>&1; }
# name | what is missing, if anything | command (a bash word list)
programs=(
    "make|$(has make || echo 'make (apt-get install make)')|make -B -j2 -s -C $work/c CC=cc"
    "ccache_mold|$(has ccache && has mold || echo 'ccache or mold (apt-get install ccache mold)')|env CCACHE_DIR=$work/ccache make -B -j2 -s -C $work/c 'CC=ccache cc' LDFLAGS=-fuse-ld=mold"
    "ninja|$(has ninja && has cmake || echo 'cmake or ninja (apt-get install cmake ninja-build)')|sh -c 'ninja -C $work/ninja -t clean >/dev/null && ninja -C $work/ninja -j2 >/dev/null'"
    "xargs|$(has xargs || echo 'xargs (findutils)')|sh -c 'seq 4 | xargs -P2 -I{} sh $work/burn.sh'"
    "pool_fork||$py $work/pool.py fork"
    "pool_forkserver||$py $work/pool.py forkserver"
    "pool_spawn||$py $work/pool.py spawn"
    "joblib|$("$py" -c 'import joblib' 2>/dev/null || echo 'joblib (apt-get install python3-joblib)')|$py $work/joblib_pool.py"
    "hyperfine|$(has hyperfine || echo 'hyperfine (apt-get install hyperfine)')|hyperfine -N --runs 3 --warmup 0 --style none $work/spin2"
    "xz_pipe|$(has xz || echo 'xz (apt-get install xz-utils)')|sh -c 'head -c 24M $work/text | xz -T2 -1 -c >/dev/null'"
    "unxz_pipe|$([ -s "$work/text.xz" ] || echo 'xz (apt-get install xz-utils)')|sh -c 'xz -dc $work/text.xz | md5sum >/dev/null'"
    "faketime|$([ -n "$faketime_lib" ] || echo 'libfaketime (apt-get install libfaketime)')|env FAKETIME=-1d FAKETIME_LIB=$faketime_lib sh $work/stacked.sh $work/spin2 wait"
)
labels=(
    "make|\`make -j2\` of 16 C files"
    "ccache_mold|ccache + mold (\`make -j2\`, ccache warm)"
    "ninja|\`cmake\` + \`ninja -j2\` (the same 16 files)"
    "xargs|\`seq 4 \\| xargs -P2 -I{} sh burn.sh\` (a shell loop as the job)"
    "pool_fork|Python \`multiprocessing\` Pool(2), fork"
    "pool_forkserver|Pool(2), forkserver"
    "pool_spawn|Pool(2), spawn"
    "joblib|joblib Parallel(n_jobs=2) (loky workers)"
    "hyperfine|hyperfine -N (Rust \`Command\`, posix_spawn) of a 2-thread program"
    "xz_pipe|\`head -c 24M \\| xz -T2\`"
    "unxz_pipe|\`xz -dc \\| md5sum\`"
    "faketime|two busy workers of a waiting main thread under libfaketime (\`FAKETIME=-1d\`)"
)
if has cmake && has ninja; then
    cmake -S "$work/c" -B "$work/ninja" -G Ninja >"$work/cmake.log" 2>&1 || die "cmake failed (see $work/cmake.log)"
fi
for want in ${only//,/ }; do
    printf '%s\n' "${programs[@]}" | grep -q "^$want|" || die "--only: no program '$want' (see --help)"
done

modes=(taskset goset hand)
prefix() {
    case $1 in
        taskset) echo "taskset -c $cpus" ;;
        goset) echo "$bin/goset-run -n $n --sample 0 -q --include $cpus ${share[*]} --" ;;
        hand) echo "env LD_PRELOAD=$bin/libgoset.so GOSET_CPUS=$cpus" ;;
    esac
}
# One run: sets `result` to its wall seconds, or "fail RC". Placement variables of the caller
# are dropped. The run is waited for in the background, so that a signal to this script ends it
# (timeout passes SIGTERM on to the command; it runs in a process group of its own).
run_pid=
trap '[ -n "$run_pid" ] && kill -TERM "$run_pid" 2>/dev/null; echo "run.sh: interrupted" >&2; exit 130' INT TERM HUP
one_run() {
    local mode=$1 name=$2 cmd=$3 t0 t1 rc
    local -a words
    eval "words=($(prefix "$mode") $cmd)"
    t0=$EPOCHREALTIME
    env -u LD_PRELOAD -u GOSET_CPUS -u GOSET_PLAN -u GOSET_LOG timeout -k 5 300 "${words[@]}" \
        </dev/null >/dev/null 2>>"$out/$name.err" &
    run_pid=$!
    wait "$run_pid"
    rc=$?
    run_pid=
    t1=$EPOCHREALTIME
    if [ "$rc" -eq 0 ]; then
        result=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
    else
        result="fail $rc"
    fi
}

: >"$out/times.tsv"
: >"$out/skipped.txt"
echo "run.sh: CPUs $cpus, $runs timed runs per way (taskset, goset-run, by hand), scale $scale; results in $out" >&2
for p in "${programs[@]}"; do
    IFS='|' read -r name missing cmd <<<"$p"
    if [ -n "$only" ] && ! echo ",$only," | grep -q ",$name,"; then continue; fi
    if [ -n "$missing" ]; then
        echo "skip $name: no $missing" | tee -a "$out/skipped.txt" >&2
        continue
    fi
    echo "run.sh: [$(($(date +%s) - start)) s] $name" >&2
    one_run taskset "$name" "$cmd"
    case $result in fail*) echo "run.sh: $name: the warm-up run failed ($result; see $out/$name.err)" >&2 ;; esac
    for r in $(seq "$runs"); do
        for k in 0 1 2; do
            mode=${modes[$(((r + k) % 3))]}
            one_run "$mode" "$name" "$cmd"
            printf '%s\t%s\t%s\t%s\n' "$name" "$mode" "$r" "$result" >>"$out/times.tsv"
        done
    done
done

# --- the table ---
lscpu_field() { LC_ALL=C lscpu 2>/dev/null | sed -n "s/^$1:[[:space:]]*//p" | head -1; }
{
    echo "Machine: $(lscpu_field 'Model name'), $(nproc --all) CPUs, hypervisor: $(lscpu_field 'Hypervisor vendor' | sed 's/^$/none/');" \
        "kernel $(uname -r); load average before: $(cut -d' ' -f1-3 /proc/loadavg); $(date -u '+%Y-%m-%d %H:%M UTC');" \
        "goset $(git -C "$root" rev-parse --short HEAD 2>/dev/null)$(git -C "$root" diff --quiet HEAD -- preload launcher plan 2>/dev/null || echo ' (modified)')," \
        "binaries from $bin."
    echo
    echo "Run: \`bench/programs/run.sh --cpus $cpus --runs $runs --scale $scale${only:+ --only $only}\`. Median wall time of $runs" \
        "alternating runs of each way; ratios are medians over taskset's median (lower is better; 1.0 is taskset)."
    echo
    "$py" - "$out/times.tsv" "${labels[@]}" <<'PY'
import sys
from collections import defaultdict
times = defaultdict(list)
fails = defaultdict(int)
order = []
for line in open(sys.argv[1]):
    name, mode, _, value = line.rstrip("\n").split("\t")
    if name not in order:
        order.append(name)
    if value.startswith("fail"):
        fails[(name, mode)] += 1
    else:
        times[(name, mode)].append(float(value))
labels = dict(l.split("|", 1) for l in sys.argv[2:])
def median(xs):
    xs = sorted(xs)
    return None if not xs else (xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2)
def spread(xs):
    m = median(xs)
    return "-" if not xs else "%.0f%%" % (100 * (max(xs) - min(xs)) / m)
print("| program | taskset s (spread) | goset-run / taskset | by hand / taskset | failed runs |")
print("|---|---|---|---|---|")
for name in order:
    base = median(times[(name, "taskset")])
    cells = []
    for mode in ("goset", "hand"):
        m = median(times[(name, mode)])
        cells.append("-" if m is None or not base else "%.2f (%s)" % (m / base, spread(times[(name, mode)])))
    failed = sum(fails[(name, m)] for m in ("taskset", "goset", "hand"))
    print("| %s | %s | %s | %s | %d |" % (labels.get(name, name),
          "-" if base is None else "%.2f (%s)" % (base, spread(times[(name, "taskset")])),
          cells[0], cells[1], failed))
PY
    if [ -s "$out/skipped.txt" ]; then
        echo
        echo "Skipped:"
        sed 's/^/- /' "$out/skipped.txt"
    fi
} >"$out/programs.md"
echo
cat "$out/programs.md"
echo
echo "run.sh: done in $(($(date +%s) - start)) s; $out/programs.md" >&2
