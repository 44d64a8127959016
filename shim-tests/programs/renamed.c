/* A worker that names itself after it starts (as a JVM's GC workers and beam's schedulers do),
 * burns about 0.4 s so that the housekeeper reads it under its own name, and is still alive
 * when the process exits (no exit record of its own). The shim's create record carries the
 * creator's name: the report must show the worker's own. */
#define _GNU_SOURCE
#include <pthread.h>
#include <semaphore.h>
#include <time.h>
#include <unistd.h>

static sem_t burned;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *worker(void *arg) {
    pthread_setname_np(pthread_self(), "own-name");
    volatile double x = 1;
    for (double end = now() + 0.4; now() < end;)
        x = x * 1.0000001 + 1e-9;
    sem_post(&burned);
    for (;;)
        pause();
    return arg;
}

int main(void) {
    sem_init(&burned, 0, 0);
    pthread_t t;
    if (pthread_create(&t, NULL, worker, NULL) != 0)
        return 1;
    while (sem_wait(&burned) != 0) {
    }
    return 0;
}
