/* placed_threads [N [DEADLINE_S [HOLD_S]]]: N busy threads (default 2) that wait to be placed,
 * then report.
 *
 * Each thread spins, about a millisecond of arithmetic between reads of its own
 * /proc/thread-self/status, until every one of the N is allowed exactly one CPU, no two the
 * same, and has been for HOLD_S seconds (default 0.2: a mask inherited by chance must not end
 * the run before goset's housekeeper saw the thread), or until DEADLINE_S seconds (default 30)
 * pass. Then each reports (report.h) as role=busy id=<i>, and main exits 0, or 3 at the
 * deadline. The shim places such threads at birth; in a program it cannot reach (musl, static)
 * only the housekeeper can, and without goset they never are: the program times out. */
#include "report.h"
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#define MAX_THREADS 64

static int n = 2;
static double deadline_s = 30, hold_s = 0.2;
static atomic_int single_cpu[MAX_THREADS]; /* the one CPU thread i is allowed, or -1 */
static atomic_int timed_out;
static pthread_barrier_t all_done;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The calling thread's one allowed CPU, or -1 when it may run on more (or the file is odd). */
static int own_single_cpu(void) {
    char allowed[256];
    read_allowed("/proc/thread-self/status", allowed, sizeof allowed);
    char *end;
    long cpu = strtol(allowed, &end, 10);
    return end != allowed && *end == 0 ? (int)cpu : -1;
}

static int all_placed(void) {
    for (int i = 0; i < n; i++) {
        int c = atomic_load(&single_cpu[i]);
        if (c < 0)
            return 0;
        for (int j = 0; j < i; j++)
            if (atomic_load(&single_cpu[j]) == c)
                return 0;
    }
    return 1;
}

static void *busy(void *arg) {
    long i = (long)arg;
    double deadline = now() + deadline_s, since = -1;
    volatile unsigned long x = 0;
    for (;;) {
        for (int k = 0; k < 1000000; k++)
            x += k;
        atomic_store(&single_cpu[i], own_single_cpu());
        if (!all_placed())
            since = -1;
        else if (since < 0)
            since = now();
        if (since >= 0 && now() - since >= hold_s)
            break;
        if (now() > deadline) {
            atomic_store(&timed_out, 1);
            break;
        }
    }
    /* Nobody reports before every thread has stopped waiting: a report is not a placement. */
    pthread_barrier_wait(&all_done);
    report_self("busy", i, "");
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1)
        n = atoi(argv[1]);
    if (argc > 2)
        deadline_s = atof(argv[2]);
    if (argc > 3)
        hold_s = atof(argv[3]);
    if (n < 1 || n > MAX_THREADS) {
        fprintf(stderr, "placed_threads: bad thread count\n");
        return 100;
    }
    pthread_t t[MAX_THREADS];
    pthread_barrier_init(&all_done, NULL, n);
    for (int i = 0; i < n; i++)
        atomic_store(&single_cpu[i], -1);
    for (long i = 0; i < n; i++) {
        int rc = pthread_create(&t[i], NULL, busy, (void *)i);
        if (rc != 0) {
            fprintf(stderr, "placed_threads: pthread_create: %s\n", strerror(rc));
            return 101;
        }
    }
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    return atomic_load(&timed_out) ? 3 : 0;
}
