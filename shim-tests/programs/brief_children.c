/* A creator that spawns brief threads one after another, each joined before the next (a
 * create-and-join loop, as a churning server's dispatcher does).
 *
 * brief_children COUNT [SPIN_MS [WORK_US]]: prints
 *   main allowed=<its kernel mask>
 *   child <i> allowed=<its kernel mask>
 * for each child, the mask read from /proc (the kernel's, not the shim's answer to
 * sched_getaffinity). With SPIN_MS, then creates one more child and computes beside it: both
 * spin for SPIN_MS ms, and it prints
 *   last allowed=<the last child's mask when it stopped> main=<main's mask then>
 * (a child born beside a creator that waited, which then lives on and computes). With WORK_US,
 * the creator computes for WORK_US µs after each creation before it joins the child (a
 * fork-join loop whose creator works beside its brief children), and each child line ends in
 *   wall=<µs> cpu=<µs>
 * the creator's monotonic clock and its own CPU time just before that child's creation, and
 * after the last join it prints
 *   end wall=<µs> cpu=<µs>
 * so that a reader can tell the intervals in which the creator really ran from those in which
 * it waited for a CPU (another program holding it, or its child's). To make those waits rare
 * on a shared machine, with WORK_US it first takes the lowest real-time priority
 * (SCHED_RR 1) where it may (root), before it creates any thread: its children inherit it,
 * and a child that wakes then runs at once, where a normal one can wait a whole tick for
 * another program's slice to end. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <time.h>

static char masks[1000][256];
static long long walls[1000], cpus[1000];
static long spin_ms, work_us;

static void allowed(char *out, size_t size) {
    FILE *f = fopen("/proc/thread-self/status", "r");
    char line[512];
    snprintf(out, size, "?");
    if (!f) return;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "Cpus_allowed_list:", 18)) {
            char *v = line + 18;
            v += strspn(v, " \t");
            v[strcspn(v, "\n")] = 0;
            snprintf(out, size, "%s", v);
        }
    fclose(f);
}

static void *child(void *arg) {
    char *out = arg;
    allowed(out, 256);
    return NULL;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static long long micros(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
}

static void spin_for(double secs) {
    volatile unsigned long x = 0;
    double end = now() + secs;
    while (now() < end)
        for (int i = 0; i < 100; i++) x += i;
}

static void spin(void) { spin_for(spin_ms / 1000.0); }

static void *spinner(void *arg) {
    spin();
    allowed(arg, 256);
    return NULL;
}

int main(int argc, char **argv) {
    int count = argc > 1 ? atoi(argv[1]) : 0;
    spin_ms = argc > 2 ? atol(argv[2]) : 0;
    work_us = argc > 3 ? atol(argv[3]) : 0;
    if (count < 1 || count > 1000 || spin_ms < 0 || spin_ms > 60000 || work_us < 0 ||
        work_us > 1000000) {
        fprintf(stderr,
                "usage: brief_children COUNT (1-1000) [SPIN_MS (0-60000) [WORK_US (0-1000000)]]\n");
        return 2;
    }
    struct sched_param rr = {.sched_priority = 1};
    /* Without the privilege it fails, and nothing changes. */
    if (work_us > 0) sched_setscheduler(0, SCHED_RR, &rr);
    char own[256];
    allowed(own, sizeof own);
    printf("main allowed=%s\n", own);
    for (int i = 0; i < count; i++) {
        pthread_t t;
        walls[i] = micros(CLOCK_MONOTONIC);
        cpus[i] = micros(CLOCK_THREAD_CPUTIME_ID);
        if (pthread_create(&t, NULL, child, masks[i])) return 1;
        spin_for(work_us / 1e6);
        if (pthread_join(t, NULL)) return 1;
    }
    long long end_wall = micros(CLOCK_MONOTONIC), end_cpu = micros(CLOCK_THREAD_CPUTIME_ID);
    for (int i = 0; i < count; i++) {
        printf("child %d allowed=%s", i, masks[i]);
        if (work_us > 0) printf(" wall=%lld cpu=%lld", walls[i], cpus[i]);
        printf("\n");
    }
    if (work_us > 0) printf("end wall=%lld cpu=%lld\n", end_wall, end_cpu);
    if (spin_ms > 0) {
        pthread_t t;
        char last[256], mine[256];
        if (pthread_create(&t, NULL, spinner, last)) return 1;
        spin();
        allowed(mine, sizeof mine);
        if (pthread_join(t, NULL)) return 1;
        printf("last allowed=%s main=%s\n", last, mine);
    }
    return 0;
}
