/* own_noise SECONDS: a task whose noise goes wherever it runs. For SECONDS, one thread sleeps
 * 1 us at a time with a 1 ns timer slack (a storm of its own timer interrupts), while the
 * main thread starts one short-lived thread after another, each spinning 2 ms and ending
 * (most of them born and gone between two housekeeper polls). At the end of each second of
 * wall time it prints to stdout:
 *   cpu: <sched_getcpu of the main thread> threads: <short-lived threads so far>
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <time.h>

static atomic_int stop;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *sleeper(void *arg) {
    (void)arg;
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    struct timespec us = {0, 1000};
    while (!atomic_load(&stop))
        nanosleep(&us, NULL);
    return NULL;
}

static void *spinner(void *arg) {
    (void)arg;
    double end = now() + 0.002;
    volatile unsigned long x = 0;
    while (now() < end)
        x++;
    return NULL;
}

int main(int argc, char **argv) {
    int seconds = argc > 1 ? atoi(argv[1]) : 6;
    if (seconds < 1 || seconds > 3600) {
        fprintf(stderr, "own_noise: SECONDS must be 1-3600\n");
        return 100;
    }
    pthread_t storm;
    if (pthread_create(&storm, NULL, sleeper, NULL) != 0) {
        fprintf(stderr, "own_noise: pthread_create failed\n");
        return 1;
    }
    double start = now();
    long made = 0;
    for (int s = 1; s <= seconds; s++) {
        while (now() - start < s) {
            pthread_t t;
            if (pthread_create(&t, NULL, spinner, NULL) != 0) {
                fprintf(stderr, "own_noise: pthread_create failed\n");
                return 1;
            }
            pthread_join(t, NULL);
            made++;
        }
        printf("cpu: %d threads: %ld\n", sched_getcpu(), made);
        fflush(stdout);
    }
    atomic_store(&stop, 1);
    pthread_join(storm, NULL);
    return 0;
}
