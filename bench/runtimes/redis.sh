#!/usr/bin/env bash
# redis with I/O threads: the command goset-bench runs under each mode. It starts
#   redis-server --io-threads 4 --io-threads-do-reads yes --port P --save '' --appendonly no
# as its own child, so the server has the mode's placement (the shim, goset-run's housekeeper, or
# the shared mask), and measures it with redis-benchmark -t set,get -c CLIENTS (64) run OUTSIDE
# the task:
#   - with REDIS_CLIENT_DIR (run.sh sets it): by redis_client.sh, which run.sh started beforehand
#     outside goset-bench, pinned to the CPUs not in the task's selection (all CPUs when the
#     selection is the whole machine, as with -n 2 on 2 CPUs); nothing of the task's process tree
#     or environment, so goset-run's housekeeper never sees it;
#   - without: as a child of this script with LD_PRELOAD and GOSET_* removed, under taskset of the
#     online CPUs not in GOSET_BENCH_CPUS (else GOSET_CPUS, else this process's mask); under goset
#     the housekeeper still counts it as the task's (a by-hand fallback, not for the tables).
# A warm-up benchmark (WARM_REQUESTS, 2000 per test) is not counted and sizes the counted one to
# about DURATION seconds (2; REQUESTS per test fixes it). Prints the server's threads, the
# throughput (requests per second over SET and GET together) and as the checksum the server's
# DBSIZE (1: both tests use one key). The server is killed on exit.
# --check: exit 0 when redis-server, redis-cli and redis-benchmark are there, else skip, exit 3.
for tool in redis-server redis-cli redis-benchmark; do
    command -v "$tool" >/dev/null || { echo "skip: redis: no $tool"; exit 3; }
done
[ "${1:-}" = --check ] && { echo "ok: redis $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p')"; exit 0; }

clients=${CLIENTS:-64}
io_threads=${IO_THREADS:-4}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/goset-redis.XXXXXX")
server=
cleanup() {
    [ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 143' TERM INT HUP

# The server: a free port, up within 5 s.
for _ in 1 2 3 4 5; do
    port=$((20000 + RANDOM % 20000))
    redis-cli -p "$port" ping >/dev/null 2>&1 && continue
    redis-server --port "$port" --bind 127.0.0.1 --io-threads "$io_threads" \
        --io-threads-do-reads yes --save '' --appendonly no --daemonize no \
        >"$tmp/server.log" 2>&1 &
    server=$!
    for _ in $(seq 100); do
        redis-cli -p "$port" ping 2>/dev/null | grep -q PONG && break 2
        kill -0 "$server" 2>/dev/null || break
        sleep 0.05
    done
    kill "$server" 2>/dev/null; wait "$server" 2>/dev/null; server=
done
[ -n "$server" ] || { echo "redis-server did not start:" >&2; tail -5 "$tmp/server.log" >&2; exit 1; }

# One benchmark of N requests per test (NAME: warm, counted); its CSV on stdout.
bench() {
    local n=$1 name=$2
    if [ -n "${REDIS_CLIENT_DIR:-}" ]; then
        local res=$tmp/res.$name
        timeout 10 bash -c 'echo "$1" >"$2"' _ "$port $n ${CLIENT_THREADS:-4} $clients $res" \
            "$REDIS_CLIENT_DIR/req" || { echo "redis_client.sh is not reading $REDIS_CLIENT_DIR/req" >&2; return 1; }
        for _ in $(seq 2400); do      # 120 s at most
            [ -f "$res" ] && { cat "$res"; grep -q 'rc=0' "$res.err" || { cat "$res.err" >&2; return 1; }; return 0; }
            kill -0 "$server" 2>/dev/null || { echo "redis-server died" >&2; return 1; }
            sleep 0.05
        done
        echo "no answer from redis_client.sh" >&2
        return 1
    fi
    local task=${GOSET_BENCH_CPUS:-${GOSET_CPUS:-$(awk '/^Cpus_allowed_list/ { print $2 }' /proc/self/status)}}
    local others
    others=$(python3 - "$task" <<'PY' 2>/dev/null
import os, sys
def parse(s):
    out = set()
    for part in filter(None, s.split(",")):
        a, _, b = part.partition("-")
        out.update(range(int(a), int(b or a) + 1))
    return out
rest = sorted(parse(open("/sys/devices/system/cpu/online").read().strip()) - parse(sys.argv[1]))
print(",".join(map(str, rest)))
PY
)
    local pin=()
    [ -n "$others" ] && pin=(taskset -c "$others")
    env -u LD_PRELOAD -u GOSET_CPUS -u GOSET_PLAN "${pin[@]}" redis-benchmark -h 127.0.0.1 \
        -p "$port" -t set,get -n "$n" -c "$clients" --threads "${CLIENT_THREADS:-4}" --csv </dev/null
}

# "SET","123456.79",... and "GET",...: requests per second over both, as one rate.
rate_of() {
    awk -F'"' -v n="$1" '$2 == "SET" || $2 == "GET" { t += n / $4; k++ }
        END { if (k == 2 && t > 0) printf "%.1f", 2 * n / t }'
}
# Warm-up (not counted) that also sizes the counted run: REQUESTS when set, else what the
# warm-up's rate does in DURATION (SET and GET together), at least 2000 per test.
warm=${WARM_REQUESTS:-2000}
csv=$(bench "$warm" warm) || exit 1
rate=$(echo "$csv" | rate_of "$warm")
[ -n "$rate" ] || { echo "no SET/GET rates in: $csv" >&2; exit 1; }
requests=${REQUESTS:-$(awk -v r="$rate" -v d="${DURATION:-2}" 'BEGIN { n = int(r * d / 2); print (n < 2000 ? 2000 : n) }')}
csv=$(bench "$requests" counted) || exit 1
rate=$(echo "$csv" | rate_of "$requests")
[ -n "$rate" ] || { echo "no SET/GET rates in: $csv" >&2; exit 1; }
echo "process threads: $(ls "/proc/$server/task" 2>/dev/null | wc -l)"
echo "throughput: $rate ops/s"
echo "checksum: $(redis-cli -p "$port" dbsize)"
