/* many_threads <count>: more threads alive at once than the shim's first registry chunk
 * (1024) holds. Each thread, with a small stack, pins itself with pthread_setaffinity_np to
 * CPU (its index mod the CPUs in its mask) and reads the mask back with pthread_getaffinity_np
 * (readback=, must be that CPU), then waits on a barrier, so all are alive together. Then the
 * main thread sets the affinity of the last thread (whose registry entry lies past the first
 * chunk) to the CPU of the mask after the one that thread runs on; that thread, after a second barrier,
 * reads its mask back (other=, must be the main thread's request) and reports once more (id
 * <count>) with its Cpus_allowed_list, which must still be its slot's CPU. */
#define BUSY_ITERATIONS 20000L
#include "report.h"
#include <pthread.h>

static pthread_barrier_t pinned, set_by_main;
static cpu_set_t start_mask;
static int asked_by_main = -1;
static int last_runs_on = -1;
static long count;

static int nth_cpu(const cpu_set_t *set, int i) {
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, set) && i-- == 0)
            return c;
    return -1;
}

static int only_cpu(const cpu_set_t *set) {
    return CPU_COUNT(set) == 1 ? nth_cpu(set, 0) : -1;
}

static void *body(void *arg) {
    long id = (long)arg;
    cpu_set_t want, back;
    int cpu = nth_cpu(&start_mask, (int)(id % CPU_COUNT(&start_mask)));
    CPU_ZERO(&want);
    CPU_SET(cpu, &want);
    int rc = pthread_setaffinity_np(pthread_self(), sizeof want, &want);
    CPU_ZERO(&back);
    int back_rc = pthread_getaffinity_np(pthread_self(), sizeof back, &back);
    char extra[128];
    snprintf(extra, sizeof extra, "asked=%d rc=%d back_rc=%d readback=%d", cpu, rc, back_rc,
             only_cpu(&back));
    report_self("thread", id, extra);
    if (id == count - 1)
        last_runs_on = sched_getcpu();
    pthread_barrier_wait(&pinned);
    pthread_barrier_wait(&set_by_main);
    if (id == count - 1) {
        CPU_ZERO(&back);
        pthread_getaffinity_np(pthread_self(), sizeof back, &back);
        snprintf(extra, sizeof extra, "asked=%d other=%d", asked_by_main, only_cpu(&back));
        report_self("last", count, extra);
    }
    return NULL;
}

int main(int argc, char **argv) {
    count = argc > 1 ? atol(argv[1]) : 1100;
    if (sched_getaffinity(0, sizeof start_mask, &start_mask) != 0) {
        perror("many_threads: sched_getaffinity");
        return 102;
    }
    pthread_t *threads = calloc((size_t)count, sizeof *threads);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    pthread_barrier_init(&pinned, NULL, (unsigned)count + 1);
    pthread_barrier_init(&set_by_main, NULL, (unsigned)count + 1);
    for (long i = 0; i < count; i++) {
        int err = pthread_create(&threads[i], &attr, body, (void *)i);
        if (err != 0) {
            fprintf(stderr, "many_threads: pthread_create %ld: %s\n", i, strerror(err));
            return 101;
        }
    }
    pthread_barrier_wait(&pinned);
    int n = CPU_COUNT(&start_mask);
    int pos = 0;
    for (int i = 0; i < n; i++)
        if (nth_cpu(&start_mask, i) == last_runs_on)
            pos = i;
    cpu_set_t other;
    CPU_ZERO(&other);
    asked_by_main = nth_cpu(&start_mask, (pos + 1) % n);
    CPU_SET(asked_by_main, &other);
    int rc = pthread_setaffinity_np(threads[count - 1], sizeof other, &other);
    pthread_barrier_wait(&set_by_main);
    for (long i = 0; i < count; i++)
        pthread_join(threads[i], NULL);
    char extra[64];
    snprintf(extra, sizeof extra, "threads=%ld set_rc=%d", count, rc);
    report_self("main", 0, extra);
    return 0;
}
