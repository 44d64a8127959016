/* A detour source: on CPU argv[1], SCHED_FIFO at priority argv[4], busy the first argv[2] µs
 * of every argv[3] µs period (absolute periods of CLOCK_MONOTONIC, so a late wake-up eats
 * into the busy time, not beyond it). Prints "ready" once running; runs until killed. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long long ns(const struct timespec *t) { return t->tv_sec * 1000000000LL + t->tv_nsec; }

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: fifo_duty CPU BUSY_US PERIOD_US PRIORITY\n");
        return 2;
    }
    int cpu = atoi(argv[1]);
    long long busy = atoll(argv[2]) * 1000, period = atoll(argv[3]) * 1000;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set)) {
        perror("sched_setaffinity");
        return 1;
    }
    struct sched_param p = {.sched_priority = atoi(argv[4])};
    if (sched_setscheduler(0, SCHED_FIFO, &p)) {
        perror("sched_setscheduler");
        return 1;
    }
    printf("ready\n");
    fflush(stdout);
    struct timespec next, now;
    clock_gettime(CLOCK_MONOTONIC, &next);
    for (;;) {
        long long t = ns(&next) + period;
        next.tv_sec = t / 1000000000LL;
        next.tv_nsec = t % 1000000000LL;
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
        do
            clock_gettime(CLOCK_MONOTONIC, &now);
        while (ns(&now) < t + busy);
    }
}
