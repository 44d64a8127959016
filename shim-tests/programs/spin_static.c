/* Busy threads that report where they ended up, read from their own /proc files.
 *
 * Built with `gcc -static -pthread`, so LD_PRELOAD cannot reach it: only goset's housekeeper
 * can place its threads. Each of N busy threads spins, re-reading its own Cpus_allowed_list,
 * until every busy thread is allowed exactly one CPU and no two share one, and has been for
 * argv[3] seconds (default 0: a placement inherited by chance must not end the run before
 * the housekeeper saw it), or argv[2] seconds (default 30) pass; then each reads the CPU it
 * runs on (stat field 39), all end together, and main prints one line per thread (argv[1]
 * threads, default 2):
 *   busy <i> tid <tid> allowed <cpulist> processor <cpu>
 * Exit status 0 when the condition was met, 3 on the deadline. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAX_THREADS 64
static double deadline_s = 30; /* argv[2] */
static double hold_s = 0;      /* argv[3] */

static int n;
static atomic_int single_cpu[MAX_THREADS]; /* the one allowed CPU, or -1 */
static int tids[MAX_THREADS], processors[MAX_THREADS];
static char allowed[MAX_THREADS][64];
static atomic_int timed_out;
/* Set by the first thread that saw the condition hold: the others stop at once too. A thread
 * that ended on its own while another still watched would leave its CPU to the housekeeper,
 * which may then move the other there, and the other would time out on the ended one's
 * stale CPU. */
static atomic_int done;
/* Threads that read where they ended up. None ends before all did: an ended thread frees its
 * CPU, and the housekeeper may move another there between its last two reads (seen: both
 * reported on the freed CPU). */
static atomic_int recorded;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The Cpus_allowed_list of thread tid into out; returns the CPU when it is a single one. */
static int read_allowed(int tid, char *out, size_t len) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/self/task/%d/status", tid);
    FILE *f = fopen(path, "r");
    int cpu = -1;
    out[0] = 0;
    if (!f) return -1;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "Cpus_allowed_list:", 18) == 0) {
            char *v = line + 18;
            while (*v == ' ' || *v == '\t') v++;
            v[strcspn(v, "\n")] = 0;
            snprintf(out, len, "%s", v);
            char *end;
            long c = strtol(v, &end, 10);
            if (end != v && *end == 0) cpu = (int)c;
        }
    }
    fclose(f);
    return cpu;
}

/* Field 39 of the thread's own stat: the CPU it last ran on (this one, as it is running). */
static int read_processor(int tid) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", tid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t len = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[len] = 0;
    char *p = strrchr(buf, ')');
    if (!p) return -1;
    int field = 2;
    for (p++; *p && field < 39; p++)
        if (*p == ' ') field++;
    return atoi(p);
}

static int all_placed(void) {
    for (int i = 0; i < n; i++) {
        int c = atomic_load(&single_cpu[i]);
        if (c < 0) return 0;
        for (int j = 0; j < i; j++)
            if (atomic_load(&single_cpu[j]) == c) return 0;
    }
    return 1;
}

static void *busy(void *arg) {
    int i = (int)(long)arg;
    int tid = (int)syscall(SYS_gettid);
    tids[i] = tid;
    double deadline = now() + deadline_s;
    double since = -1; /* when all_placed() last became true */
    volatile unsigned long x = 0;
    for (;;) {
        /* About a millisecond of pure computation between reads: a CPU-bound thread. */
        for (int k = 0; k < 1000000; k++) x += k;
        atomic_store(&single_cpu[i], read_allowed(tid, allowed[i], sizeof allowed[i]));
        if (atomic_load(&done)) break;
        if (!all_placed())
            since = -1;
        else if (since < 0)
            since = now();
        if (since >= 0 && now() - since >= hold_s) {
            atomic_store(&done, 1);
            break;
        }
        if (now() > deadline) {
            atomic_store(&timed_out, 1);
            break;
        }
    }
    processors[i] = read_processor(tid);
    atomic_fetch_add(&recorded, 1);
    while (atomic_load(&recorded) < n) x++;
    return NULL;
}

int main(int argc, char **argv) {
    n = argc > 1 ? atoi(argv[1]) : 2;
    if (argc > 2) deadline_s = atof(argv[2]);
    if (argc > 3) hold_s = atof(argv[3]);
    if (n < 1 || n > MAX_THREADS) return 2;
    pthread_t t[MAX_THREADS];
    for (int i = 0; i < n; i++) atomic_store(&single_cpu[i], -1);
    for (int i = 0; i < n; i++) pthread_create(&t[i], NULL, busy, (void *)(long)i);
    for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < n; i++)
        printf("busy %d tid %d allowed %s processor %d\n", i, tids[i], allowed[i], processors[i]);
    return atomic_load(&timed_out) ? 3 : 0;
}
