/* goset shim benchmark: thread creation and affinity-call cost.
 *
 *   bench create N   create+join N threads with a NULL attr, print the mean per thread
 *   bench pinned N   the same, each with an attr mask, round-robin over the allowed CPUs
 *   bench setaff N   N sched_setaffinity(0, {own cpu}) calls, print the mean per call
 *
 * BENCH_MAIN_CPU=C pins the main thread to C first; BENCH_CPUS="1 2" gives the CPUs that
 * `pinned` cycles over (default: every allowed CPU), so that hand pinning can copy the layout
 * the shim chooses (main on slot 0, each new thread on the least-loaded slot).
 *
 * Run it bare and under LD_PRELOAD=libgoset.so; run.sh does both.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void *nothing(void *arg) { return arg; }

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s create|pinned|setaff N\n", argv[0]);
        return 2;
    }
    const char *mode = argv[1];
    long n = atol(argv[2]);
    cpu_set_t allowed;
    sched_getaffinity(0, sizeof allowed, &allowed);
    int cpus[CPU_SETSIZE], ncpus = 0;
    const char *list = getenv("BENCH_CPUS");
    for (char *end; list && *list; list = end) {
        long c = strtol(list, &end, 10);
        if (end == list) break;
        cpus[ncpus++] = (int)c;
    }
    for (int c = 0; !ncpus && c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &allowed)) cpus[ncpus++] = c;
    if (getenv("BENCH_MAIN_CPU")) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(atoi(getenv("BENCH_MAIN_CPU")), &one);
        sched_setaffinity(0, sizeof one, &one);
    }
    double t0 = now();
    if (!strcmp(mode, "setaff")) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(sched_getcpu(), &one);
        for (long i = 0; i < n; i++)
            if (sched_setaffinity(0, sizeof one, &one) != 0) return perror("sched_setaffinity"), 1;
    } else {
        int pin = !strcmp(mode, "pinned");
        for (long i = 0; i < n; i++) {
            pthread_t t;
            pthread_attr_t attr, *ap = NULL;
            if (pin) {
                cpu_set_t one;
                CPU_ZERO(&one);
                CPU_SET(cpus[i % ncpus], &one);
                pthread_attr_init(&attr);
                pthread_attr_setaffinity_np(&attr, sizeof one, &one);
                ap = &attr;
            }
            if (pthread_create(&t, ap, nothing, NULL) != 0) return perror("pthread_create"), 1;
            pthread_join(t, NULL);
            if (pin) pthread_attr_destroy(&attr);
        }
    }
    double per = (now() - t0) / n * 1e6;
    printf("%-8s %8ld x %10.3f us\n", mode, n, per);
    return 0;
}
