/* Threads that churn beside threads that sleep: the housekeeper's cost under churn (a test in
 * housekeeper/threads.rs, and launcher/bench/churn.sh, which prints figures).
 *
 * spawners SPAWNERS SLEEPERS SECS: starts SLEEPERS threads that block until the end, then
 * SPAWNERS threads that each create and join short-lived threads for SECS seconds, and prints
 *   created <threads created by the spawners> in <SECS> s
 * on stdout. Small stacks (64 KiB) keep thousands of sleepers cheap. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static int gate[2];
static double end_at;
static pthread_attr_t small;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *sleeper(void *arg) {
    char c;
    (void)arg;
    /* Blocks until the write end closes. */
    while (read(gate[0], &c, 1) > 0) {
    }
    return NULL;
}

static void *nothing(void *arg) { return arg; }

static void *spawner(void *arg) {
    unsigned long *count = arg;
    while (now() < end_at) {
        pthread_t t;
        if (pthread_create(&t, &small, nothing, NULL) == 0 && pthread_join(t, NULL) == 0)
            ++*count;
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: spawners SPAWNERS SLEEPERS SECS\n");
        return 2;
    }
    int spawners = atoi(argv[1]), sleepers = atoi(argv[2]);
    double secs = atof(argv[3]);
    if (spawners < 1 || sleepers < 0 || secs <= 0 || pipe(gate)) return 2;
    pthread_attr_init(&small);
    pthread_attr_setstacksize(&small, 64 * 1024);
    pthread_t *sl = calloc(sleepers + 1, sizeof *sl), *sp = calloc(spawners, sizeof *sp);
    unsigned long *counts = calloc(spawners, sizeof *counts);
    if (!sl || !sp || !counts) return 1;
    for (int i = 0; i < sleepers; i++)
        if (pthread_create(&sl[i], &small, sleeper, NULL)) {
            perror("pthread_create");
            return 1;
        }
    end_at = now() + secs;
    for (int i = 0; i < spawners; i++)
        if (pthread_create(&sp[i], &small, spawner, &counts[i])) return 1;
    unsigned long total = 0;
    for (int i = 0; i < spawners; i++) {
        pthread_join(sp[i], NULL);
        total += counts[i];
    }
    close(gate[1]);
    for (int i = 0; i < sleepers; i++) pthread_join(sl[i], NULL);
    printf("created %lu in %g s\n", total, secs);
    return 0;
}
