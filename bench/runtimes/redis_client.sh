#!/usr/bin/env bash
# The redis-benchmark side of redis.sh, run by run.sh OUTSIDE goset-bench's runs (its own process
# tree, pinned by run.sh to the CPUs the task does not use, none of the task's environment): it
# reads requests `PORT REQUESTS THREADS CLIENTS RESULTFILE` from the FIFO DIR/req, runs
# redis-benchmark -t set,get against 127.0.0.1:PORT and writes its CSV to RESULTFILE (via a rename,
# so a reader never sees half of it). Ends when process PARENT (default: its parent, run.sh)
# is gone, or when it is no longer its parent's child.
#   redis_client.sh DIR [PARENT]
dir=$1
[ -n "$dir" ] || { echo "usage: redis_client.sh DIR" >&2; exit 2; }
fifo=$dir/req
[ -p "$fifo" ] || mkfifo "$fifo" || exit 1
parent=${2:-$PPID}
[ "$parent" -gt 1 ] 2>/dev/null || { echo "redis_client.sh: no parent to outlive" >&2; exit 1; }
exec 3<>"$fifo"    # read-write: open never blocks, and read -t can time out
# PARENT gone, or this script reparented (its parent dead, even if not yet reaped): time to go.
born=$(cut -d' ' -f4 "/proc/$$/stat")
alive() { kill -0 "$parent" 2>/dev/null && [ "$(cut -d' ' -f4 "/proc/$$/stat")" = "$born" ]; }
while alive; do
    read -r -t 1 -u 3 port requests threads clients result || continue
    [ -n "$result" ] || continue
    redis-benchmark -h 127.0.0.1 -p "$port" -t set,get -n "$requests" -c "$clients" \
        --threads "$threads" --csv >"$result.tmp" 2>"$result.err" </dev/null
    echo "rc=$?" >>"$result.err"
    mv -f "$result.tmp" "$result"
done
