/* two_pools [T [WORK [PAUSE_MS]]]: a process with two thread pools of T-1 workers each, as a
 * Python process holds OpenBLAS's and OpenMP's (default T = 2).
 *
 * Pool A works briefly beside the main thread, then its workers sleep until the end. After
 * PAUSE_MS milliseconds (default 500: a few housekeeper polls see pool A asleep), the main
 * thread creates pool B and computes together with it: WORK rounds (default 400) of about a
 * millisecond of arithmetic each, every thread the same amount, as a parallel region's team.
 * From their first round on, the main thread and pool B's workers note every CPU
 * sched_getcpu() names. Each thread then reports (report.h) as role=main, role=b or role=a
 * with seen=<the CPUs noted, as a cpulist-like list "1,3"> and first=<the CPU of its first
 * round>. A pinning tool that puts a pool B worker beside the main thread shows it in their
 * `seen` lists, whatever the timing. */
#include "report.h"
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#define MAX_T 64
#define MAX_CPU 1024

static int team = 2;
static long work = 400;
static long pause_ms = 500;
static pthread_barrier_t a_done, b_start;
static pthread_mutex_t sleep_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static int ending;

struct seen {
    unsigned char cpu[MAX_CPU];
    int first;
};

static double round_of_work(void) {
    volatile double x = 1.0;
    for (long i = 0; i < 300000; i++)
        x = x * 1.0000001 + 0.5 / (double)(i + 1);
    return x;
}

static void compute(struct seen *s, long rounds) {
    s->first = -1;
    for (long r = 0; r < rounds; r++) {
        int cpu = sched_getcpu();
        if (s->first < 0)
            s->first = cpu;
        if (cpu >= 0 && cpu < MAX_CPU)
            s->cpu[cpu] = 1;
        round_of_work();
    }
}

static void report_seen(const char *role, long id, const struct seen *s) {
    char list[512] = "";
    size_t at = 0;
    for (int c = 0; c < MAX_CPU && at + 8 < sizeof list; c++)
        if (s->cpu[c])
            at += snprintf(list + at, sizeof list - at, "%s%d", at ? "," : "", c);
    char extra[600];
    snprintf(extra, sizeof extra, "seen=%s first=%d", list, s->first);
    report_self(role, id, extra);
}

static void *pool_a(void *arg) {
    long id = (long)arg;
    struct seen s = {0};
    compute(&s, 20);
    pthread_barrier_wait(&a_done);
    pthread_mutex_lock(&sleep_lock);
    while (!ending)
        pthread_cond_wait(&wake, &sleep_lock);
    pthread_mutex_unlock(&sleep_lock);
    report_seen("a", id, &s);
    return NULL;
}

static void *pool_b(void *arg) {
    long id = (long)arg;
    pthread_barrier_wait(&b_start);
    struct seen s = {0};
    compute(&s, work);
    report_seen("b", id, &s);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1)
        team = atoi(argv[1]);
    if (argc > 2)
        work = atol(argv[2]);
    if (argc > 3)
        pause_ms = atol(argv[3]);
    if (team < 2 || team > MAX_T || work < 1 || pause_ms < 0) {
        fprintf(stderr, "usage: two_pools [T (2-%d) [WORK [PAUSE_MS]]]\n", MAX_T);
        return 2;
    }
    pthread_t a[MAX_T], b[MAX_T];
    pthread_barrier_init(&a_done, NULL, team);
    pthread_barrier_init(&b_start, NULL, team);
    struct seen main_a = {0};
    for (long i = 1; i < team; i++)
        pthread_create(&a[i], NULL, pool_a, (void *)i);
    compute(&main_a, 20);
    pthread_barrier_wait(&a_done);
    struct timespec pause = {pause_ms / 1000, (pause_ms % 1000) * 1000000L};
    nanosleep(&pause, NULL);
    for (long i = 1; i < team; i++)
        pthread_create(&b[i], NULL, pool_b, (void *)i);
    pthread_barrier_wait(&b_start);
    struct seen main_b = {0};
    compute(&main_b, work);
    for (long i = 1; i < team; i++)
        pthread_join(b[i], NULL);
    pthread_mutex_lock(&sleep_lock);
    ending = 1;
    pthread_cond_broadcast(&wake);
    pthread_mutex_unlock(&sleep_lock);
    for (long i = 1; i < team; i++)
        pthread_join(a[i], NULL);
    report_seen("main", 0, &main_b);
    return 0;
}
