/* seconds_loop SECONDS: one thread runs a dependent xorshift-multiply chain for SECONDS and
 * prints, at the end of each second of wall time, one line to stdout:
 *   steps/s: <chain steps done in that second> [<sched_getcpu at that moment>]
 * (goset-bench reads the i-th line as metric steps/s@i and skips the bracketed CPU). A CPU
 * shared with another busy thread halves the steps of the seconds it is shared. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    int seconds = argc > 1 ? atoi(argv[1]) : 10;
    if (seconds < 1 || seconds > 3600) {
        fprintf(stderr, "seconds_loop: SECONDS must be 1-3600\n");
        return 100;
    }
    uint64_t x = 0x9e3779b97f4a7c15ull;
    double start = now();
    for (int s = 1; s <= seconds; s++) {
        uint64_t steps = 0;
        while (now() - start < s) {
            for (int i = 0; i < 10000; i++) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x *= 0x2545f4914f6cdd1dull;
            }
            steps += 10000;
        }
        printf("steps/s: %llu [%d]\n", (unsigned long long)steps, sched_getcpu());
        fflush(stdout);
    }
    return x == 42 ? 1 : 0;
}
