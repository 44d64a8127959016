#!/bin/sh
# Writes the inputs of the programs benchmark (bench/programs/run.sh) and of its placement tests
# (shim-tests/tests/placement/programs.rs) into DIR: generated here, nothing downloaded.
#
#   bench/programs/inputs.sh DIR [SCALE]
#
# SCALE (default 10) sizes the work: the functions in each of the 16 C files, the shell loop's
# iterations (30,000 a unit), the Python jobs' (200,000 a unit) and spin2's threads' (10 million
# a unit). At 10 each job takes about a second of CPU. The tests use a small one.
#
#   c/f01.c .. c/f16.c, c/main.c, c/Makefile   `make -j2` (CC, CFLAGS and LDFLAGS from the caller)
#   c/CMakeLists.txt                            the same sources for `cmake -G Ninja` + `ninja -j2`
#   burn.sh                                     a shell busy loop, the job of `xargs -P2`;
#                                               prints its CPUs and when it ran
#   pool.py METHOD [JOBS]                       multiprocessing Pool(2) with that start method
#   joblib_pool.py [JOBS]                       joblib Parallel(n_jobs=2), loky workers
#   spin2.c [wait]                              a main thread and one worker, both computing
#                                               (wait: two workers, the main thread waits)
#   stacked.sh CMD...                           CMD with libfaketime ahead of any LD_PRELOAD
set -eu

[ $# -ge 1 ] || { echo "usage: inputs.sh DIR [SCALE]" >&2; exit 2; }
dir=$1
scale=${2:-10}
case $scale in
    '' | *[!0-9]* | 0) echo "inputs.sh: SCALE '$scale' is not a positive integer" >&2; exit 2 ;;
esac
mkdir -p "$dir/c"

i=1
while [ "$i" -le 16 ]; do
    f=$(printf '%02d' "$i")
    # Distinct functions with loops and arithmetic: enough for -O2 to spend time on.
    awk -v f="$f" -v n="$scale" 'BEGIN {
        for (k = 0; k < n; k++) {
            printf "double f%s_%d(const double *a, int len) {\n", f, k
            printf "    double s = %d.0;\n", k
            printf "    for (int i = 0; i < len; i++) {\n"
            printf "        s += a[i] * %d.5 - (s > %d ? a[(i * %d) %% len] : s / (i + 1));\n", k, k * 3, k + 7
            printf "        if ((i ^ %d) & 4) s = s * 0.5 + a[i / 2];\n", k
            printf "        for (int j = 0; j < (i & 3); j++) s -= a[j] * %d;\n", k % 5
            printf "    }\n    return s;\n}\n"
        }
        printf "double f%s_all(const double *a, int len) {\n    double s = 0;\n", f
        for (k = 0; k < n; k++) printf "    s += f%s_%d(a, len);\n", f, k
        printf "    return s;\n}\n"
    }' >"$dir/c/f$f.c"
    i=$((i + 1))
done
{
    echo '#include <stdio.h>'
    i=1
    while [ "$i" -le 16 ]; do printf 'double f%02d_all(const double *a, int len);\n' "$i"; i=$((i + 1)); done
    echo 'int main(void) {'
    echo '    double a[64], s = 0;'
    echo '    for (int i = 0; i < 64; i++) a[i] = i * 0.25;'
    i=1
    while [ "$i" -le 16 ]; do printf '    s += f%02d_all(a, 64);\n' "$i"; i=$((i + 1)); done
    printf '%s\n' '    printf("%g\n", s);'
    echo '    return 0;'
    echo '}'
} >"$dir/c/main.c"
cat >"$dir/c/Makefile" <<'MK'
CFLAGS ?= -O2
OBJS := $(patsubst %.c,%.o,$(sort $(wildcard f*.c))) main.o
prog: $(OBJS)
	$(CC) $(LDFLAGS) -o $@ $(OBJS)
%.o: %.c
	$(CC) $(CFLAGS) -c -o $@ $<
clean:
	rm -f prog *.o
MK
cat >"$dir/c/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.13)
project(programs C)
if(NOT CMAKE_BUILD_TYPE)
  set(CMAKE_BUILD_TYPE Release)
endif()
file(GLOB SOURCES f*.c main.c)
add_executable(prog ${SOURCES})
CM

cat >"$dir/burn.sh" <<SH
# A shell that computes: a busy loop of $((scale * 30)) thousand iterations. Then, with builtins
# only, one line: its pid, its Cpus_allowed_list before the loop (first) and after it
# (allowed), its start (clock ticks since boot, stat field 22) and its end (seconds since boot).
while read -r key value; do [ "\$key" = Cpus_allowed_list: ] && first=\$value; done </proc/\$\$/status
i=0
while [ "\$i" -lt $((scale * 30000)) ]; do i=\$((i + 1)); done
while read -r key value; do [ "\$key" = Cpus_allowed_list: ] && allowed=\$value; done </proc/\$\$/status
read -r up _ </proc/uptime
read -r stat </proc/\$\$/stat
set -- \$stat
shift 21
echo "burn pid=\$\$ first=\$first allowed=\$allowed start=\$1 end=\$up"
SH

cat >"$dir/pool.py" <<PY
"""Pool(2) of the start method argv[1] mapping JOBS (argv[2], default 8) CPU-bound jobs."""
import multiprocessing as mp
import sys


def work(n):
    s = 0
    for i in range(n):
        s += i * i % 7
    return s


if __name__ == "__main__":
    method = sys.argv[1]
    jobs = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    with mp.get_context(method).Pool(2) as pool:
        print(sum(pool.map(work, [$scale * 200000] * jobs, chunksize=1)))
PY

cat >"$dir/joblib_pool.py" <<PY
"""joblib Parallel(n_jobs=2) (loky worker processes) over JOBS (argv[1], default 8) of pool.py's jobs."""
import sys

from joblib import Parallel, delayed

from pool import work

if __name__ == "__main__":
    jobs = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    print(sum(Parallel(n_jobs=2)(delayed(work)($scale * 200000) for _ in range(jobs))))
PY

cat >"$dir/spin2.c" <<C
/* spin2 [wait]: the main thread and one worker each compute the same fixed work, then it prints
 * the sum (the same in every run). With "wait", two workers compute and the main thread waits
 * for them in join. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static void *work(void *arg) {
    volatile double x = 1.0;
    for (long i = 0; i < ${scale}0000000L; i++)
        x = x * 1.0000001 + 0.5 / (double)(i + 1);
    *(double *)arg = x;
    return NULL;
}

int main(int argc, char **argv) {
    double a = 0, b = 0;
    pthread_t t[2];
    int waits = argc > 1 && strcmp(argv[1], "wait") == 0;
    if (pthread_create(&t[0], NULL, work, &a) != 0)
        return 1;
    if (waits ? pthread_create(&t[1], NULL, work, &b) != 0 : work(&b) != NULL)
        return 1;
    for (int i = 0; i < 1 + waits; i++)
        pthread_join(t[i], NULL);
    printf("%.6f\\n", a + b);
    return 0;
}
C

cat >"$dir/stacked.sh" <<'SH'
# CMD with libfaketime (FAKETIME_LIB) first in LD_PRELOAD, ahead of the shim where there is one.
LD_PRELOAD="$FAKETIME_LIB${LD_PRELOAD:+:$LD_PRELOAD}" exec "$@"
SH
