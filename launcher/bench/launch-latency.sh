#!/usr/bin/env bash
# How long a default launch takes with a recent noise record: `goset-run -q -n 1 -- true` with a
# record the watch just made (a 30 ms sample), with `--sample 0` (the record alone), without a
# record (the 250 ms sample), against `taskset -c CPU true`, measured by hyperfine in one run and
# printed as each way's median over taskset's.
#
#   launcher/bench/launch-latency.sh [--runs R] [--watch DURATION] [--cpu CPU] [--out DIR]
#
#   --runs R          timed runs per way (default 20, after 3 warm-ups)
#   --watch DURATION  how long `goset noise --watch` samples first (default 60s: a recent record
#                     needs 50 s of the last 10 minutes)
#   --cpu CPU         taskset's CPU (default 1)
#   --out DIR         where hyperfine's JSON and latency.md go (default
#                     target/bench-latency/<time>)
#
# goset binaries: $GOSET_BIN (default target/release). The record is a private one in DIR
# (GOSET_NOISE_DIR): the node's is neither read nor changed. Every run has hyperfine's timeout
# off and each command is bounded by `timeout -k`.
set -u

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${GOSET_BIN:-$root/target/release}
runs=20
watch=60s
cpu=1
out=

usage() { sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
die() { echo "launch-latency.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case $1 in
        --runs) runs=${2-}; shift 2 || die "--runs needs a number" ;;
        --watch) watch=${2-}; shift 2 || die "--watch needs a duration" ;;
        --cpu) cpu=${2-}; shift 2 || die "--cpu needs a CPU" ;;
        --out) out=${2-}; shift 2 || die "--out needs a directory" ;;
        -h | --help) usage; exit 0 ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done
case $runs in '' | *[!0-9]* | 0) die "--runs '$runs': a positive integer is accepted" ;; esac
command -v hyperfine >/dev/null || die "hyperfine is missing (apt-get install -y hyperfine)"
for p in goset goset-run; do [ -x "$bin/$p" ] || die "$bin/$p: build first (cargo build --release -p goset)"; done
out=${out:-$root/target/bench-latency/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out/record" || die "cannot make $out"
rec="$out/record"

timeout -k 5 600 env GOSET_NOISE_DIR="$rec" "$bin/goset" noise --watch "$watch" --quiet ||
    die "goset noise --watch failed"
run="timeout -k 5 60 env"
hyperfine -N --warmup 3 --runs "$runs" --export-json "$out/hyperfine.json" \
    -n taskset "$run taskset -c $cpu true" \
    -n "goset-run, recent record" "$run GOSET_NOISE_DIR=$rec $bin/goset-run -q -n 1 -- true" \
    -n "goset-run --sample 0, record" "$run GOSET_NOISE_DIR=$rec $bin/goset-run -q -n 1 --sample 0 -- true" \
    -n "goset-run, no record" "$run GOSET_NOISE_DIR=none $bin/goset-run -q -n 1 -- true" \
    >"$out/hyperfine.txt" 2>&1 || { cat "$out/hyperfine.txt"; die "hyperfine failed"; }

python3 - "$out/hyperfine.json" "$(nproc)" >"$out/latency.md" <<'PY'
import json, sys
results = json.load(open(sys.argv[1]))["results"]
base = results[0]["median"]
print(f"| way | median ms | min ms | max ms | / taskset |  ({sys.argv[2]} CPUs)")
print("|---|---|---|---|---|")
for r in results:
    print(f"| {r['command']} | {1000*r['median']:.1f} | {1000*r['min']:.1f} | {1000*r['max']:.1f} | {r['median']/base:.1f} |")
PY
cat "$out/latency.md"
echo "launch-latency.sh: $out" >&2
