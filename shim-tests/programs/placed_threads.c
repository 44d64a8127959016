/* placed_threads [N [DEADLINE_S [HOLD_S [ALSO]]]]: N busy threads (default 2) that wait to be
 * placed, then report.
 *
 * Each thread spins, about a millisecond of arithmetic between reads of its own
 * /proc/thread-self/status, until every one of the N is allowed exactly one CPU, no two the
 * same, and has been for HOLD_S seconds (default 0.2: a mask inherited by chance must not end
 * the run before goset's housekeeper saw the thread), or until DEADLINE_S seconds (default 30)
 * pass. The first thread to see the hold complete copies every thread's CPU at that moment;
 * all then stop and report (report.h) as role=busy id=<i> held=<its CPU in that copy, -1 when
 * the deadline came first>, and main exits 0, or 3 at the deadline. The shim places such
 * threads at birth; in a program it cannot reach (musl, static) only the housekeeper can, and
 * without goset they never are: the program times out.
 *
 * ALSO is a list of further reports made after the busy threads':
 * - "main": the main thread, which waits in pthread_join all along, is watched too (thread 0
 *   reads its mask): it must be allowed one CPU that no busy thread has. It reports as
 *   role=main id=0 held=<its CPU in the copy> (its mask may change once the busy threads stop);
 * - "parent": every thread of the parent process (e.g. goset-run's housekeeper), as
 *   role=parent id=<i> cpu=-1;
 * - "warm": the main thread first burns half a second of CPU, as a runtime's main thread does
 *   while it starts, before it creates the busy threads and waits for them;
 * - "sleeper": after the first busy thread, the main thread creates a thread that sleeps until
 *   the end (a logger), then the other busy threads: placed by count alone, the second busy
 *   thread joins the first on one CPU while the sleepers have the other. */
#include "report.h"
#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#define MAX_THREADS 64

static int n = 2;
static int watched; /* n, and the main thread as number n when ALSO has "main" */
static double deadline_s = 30, hold_s = 0.2;
static atomic_int single_cpu[MAX_THREADS + 1]; /* the one CPU thread i is allowed, or -1 */
static atomic_int timed_out;
/* Every thread's CPU when the hold first completed. The values a thread reads later may come
 * from after goset moved some (e.g. swapped a busy thread with the idle main thread): one
 * copy taken at one moment is what "they all differed" means. */
static int held[MAX_THREADS + 1];
static atomic_int copied; /* 0 none, 1 being taken, 2 held[] is final */

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The one CPU the thread of status file `path` is allowed, or -1 when it may run on more (or
 * the file is odd). */
static int single_cpu_of(const char *path) {
    char allowed[256];
    read_allowed(path, allowed, sizeof allowed);
    char *end;
    long cpu = strtol(allowed, &end, 10);
    return end != allowed && *end == 0 ? (int)cpu : -1;
}

static int all_placed(void) {
    for (int i = 0; i < watched; i++) {
        int c = atomic_load(&single_cpu[i]);
        if (c < 0)
            return 0;
        for (int j = 0; j < i; j++)
            if (atomic_load(&single_cpu[j]) == c)
                return 0;
    }
    return 1;
}

/* Busy thread i reads the one CPU it is allowed now; thread 0 also the main thread's. */
static void read_cpus(long i) {
    atomic_store(&single_cpu[i], single_cpu_of("/proc/thread-self/status"));
    if (i == 0 && watched > n) {
        char main_status[64];
        snprintf(main_status, sizeof main_status, "/proc/self/task/%d/status", (int)getpid());
        atomic_store(&single_cpu[n], single_cpu_of(main_status));
    }
}

/* Copies every thread's CPU into held[] when they all differ now; 1 when it did (or another
 * thread already had). */
static int copy_held(void) {
    int none = 0;
    if (!atomic_compare_exchange_strong(&copied, &none, 1))
        return 1;
    for (int i = 0; i < watched; i++)
        held[i] = atomic_load(&single_cpu[i]);
    for (int i = 0; i < watched; i++)
        for (int j = 0; j < i; j++)
            if (held[i] < 0 || held[i] == held[j]) {
                atomic_store(&copied, 0);
                return 0;
            }
    atomic_store(&copied, 2);
    return 1;
}

static void *busy(void *arg) {
    long i = (long)arg;
    double deadline = now() + deadline_s, since = -1;
    volatile unsigned long x = 0;
    /* Every thread spins until the copy is final (none sleeps or ends before: an idle or
     * ended thread frees a CPU, and goset may rightly move another there meanwhile). */
    while (atomic_load(&copied) != 2) {
        for (int k = 0; k < 1000000; k++)
            x += k;
        read_cpus(i);
        if (!all_placed())
            since = -1;
        else if (since < 0)
            since = now();
        if (since >= 0 && now() - since >= hold_s && !copy_held())
            since = -1;
        if (now() > deadline) {
            atomic_store(&timed_out, 1);
            break;
        }
    }
    char line[32];
    snprintf(line, sizeof line, "held=%d", atomic_load(&copied) == 2 ? held[i] : -1);
    report_self("busy", i, line);
    return NULL;
}

/* Sleeps until the main thread closes the pipe's other end. */
static void *sleeper(void *arg) {
    char c;
    while (read(*(int *)arg, &c, 1) > 0)
        ;
    return NULL;
}

/* One role=parent report per thread of the parent process, read from its /proc files. */
static void report_parent(void) {
    char dir[64];
    snprintf(dir, sizeof dir, "/proc/%d/task", (int)getppid());
    DIR *d = opendir(dir);
    if (!d)
        return;
    long i = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        char path[384], allowed[256];
        snprintf(path, sizeof path, "%s/%s/status", dir, e->d_name);
        read_allowed(path, allowed, sizeof allowed);
        emit_line("report role=parent id=%ld pid=%d tid=%s cpu=-1 allowed=%s", i++, (int)getppid(),
                  e->d_name, allowed);
    }
    closedir(d);
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
    const char *also = argc > 4 ? argv[4] : "";
    watched = strstr(also, "main") ? n + 1 : n;
    if (strstr(also, "warm")) {
        volatile unsigned long x = 0;
        for (double until = now() + 0.5; now() < until;)
            for (int k = 0; k < 100000; k++)
                x += k;
    }
    pthread_t t[MAX_THREADS], logger;
    int wake[2] = {-1, -1};
    for (int i = 0; i < watched; i++)
        atomic_store(&single_cpu[i], -1);
    for (long i = 0; i < n; i++) {
        int rc = pthread_create(&t[i], NULL, busy, (void *)i);
        if (rc == 0 && i == 0 && strstr(also, "sleeper")) {
            rc = pipe(wake) == 0 ? pthread_create(&logger, NULL, sleeper, &wake[0]) : errno;
        }
        if (rc != 0) {
            fprintf(stderr, "placed_threads: pthread_create: %s\n", strerror(rc));
            return 101;
        }
    }
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    if (wake[1] >= 0) {
        close(wake[1]);
        pthread_join(logger, NULL);
    }
    if (watched > n) {
        char line[32];
        snprintf(line, sizeof line, "held=%d", atomic_load(&copied) == 2 ? held[n] : -1);
        report_self("main", 0, line);
    }
    if (strstr(also, "parent"))
        report_parent();
    return atomic_load(&timed_out) ? 3 : 0;
}
