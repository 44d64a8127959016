/* One busy thread beside a pool that keeps replacing a short-lived thread, so the process's
 * thread count stays the same while its threads change. Built static, so the shim cannot see
 * it: the housekeeper must place the busy thread and keep it placed.
 *
 * churn SECS: the busy thread spins for SECS seconds, reading its own Cpus_allowed_list every
 * few milliseconds, and counts how often the list changed after it first became one CPU. It
 * prints "busy tid=T allowed=L moves=M" (M = changes after the first placement) and exits 0;
 * exit 3 when it was never placed. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

static double secs;
static volatile int done;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void allowed(char *out, size_t n) {
    char line[256];
    FILE *f = fopen("/proc/thread-self/status", "r");
    out[0] = 0;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "Cpus_allowed_list:", 18)) {
            snprintf(out, n, "%s", line + 19);
            out[strcspn(out, "\n")] = 0;
        }
    if (f) fclose(f);
}

static void *busy(void *arg) {
    (void)arg;
    char first[64] = "", cur[64];
    int moves = 0;
    double end = now() + secs, next = 0;
    volatile unsigned long x = 0;
    while (now() < end) {
        for (int i = 0; i < 100000; i++) x += i;
        if (now() < next) continue;
        next = now() + 0.005;
        allowed(cur, sizeof cur);
        if (!first[0]) {
            if (!strchr(cur, ',') && !strchr(cur, '-')) snprintf(first, sizeof first, "%s", cur);
        } else if (strcmp(cur, first)) {
            moves++;
            snprintf(first, sizeof first, "%s", cur);
        }
    }
    done = 1;
    printf("busy tid=%ld allowed=%s moves=%d\n", (long)syscall(SYS_gettid), first[0] ? first : "none", moves);
    return first[0] ? NULL : (void *)1;
}

static void *brief(void *arg) {
    (void)arg;
    usleep(20000);
    return NULL;
}

int main(int argc, char **argv) {
    secs = argc > 1 ? atof(argv[1]) : 3;
    pthread_t b, t;
    void *ret;
    pthread_create(&b, NULL, busy, NULL);
    while (!done) {
        pthread_create(&t, NULL, brief, NULL);
        pthread_join(t, NULL);
    }
    pthread_join(b, &ret);
    return ret ? 3 : 0;
}
