/* Two busy threads (or processes) started on a signal, for a test that holds them stopped
 * (ptrace) before they first run: placed by the shim at birth, they have not yet written
 * their records when the housekeeper first sees them.
 *
 * held MODE PIDFILE SECS: writes its pid to PIDFILE, waits for one byte on stdin, then starts
 * two busy workers, as threads (MODE "threads") or as forked processes (MODE "forks"). Each
 * spins SECS seconds, then reads its own Cpus_allowed_list and the CPU it runs on (stat field
 * 39) and prints
 *   busy <i> tid <tid> allowed <cpulist> processor <cpu>
 * Exit status 0 once both ended. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double secs;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Spins, then prints where the calling thread ended, in one write. */
static void work(int i) {
    volatile unsigned long x = 0;
    double end = now() + secs;
    while (now() < end)
        for (int k = 0; k < 100000; k++) x += k;
    char line[256], allowed[64] = "?", stat[1024];
    int cpu = -1;
    FILE *f = fopen("/proc/thread-self/status", "r");
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "Cpus_allowed_list:", 18)) {
            char *v = line + 18;
            while (*v == ' ' || *v == '\t') v++;
            v[strcspn(v, "\n")] = 0;
            snprintf(allowed, sizeof allowed, "%.63s", v);
        }
    if (f) fclose(f);
    f = fopen("/proc/thread-self/stat", "r");
    if (f && fgets(stat, sizeof stat, f)) {
        char *p = strrchr(stat, ')');
        for (int field = 2; p && field < 39; field++) p = strchr(p + 1, ' ');
        if (p) cpu = atoi(p + 1);
    }
    if (f) fclose(f);
    int n = snprintf(line, sizeof line, "busy %d tid %ld allowed %s processor %d\n", i,
                     (long)syscall(SYS_gettid), allowed, cpu);
    if (write(1, line, n) != n) exit(1);
}

static void *thread(void *arg) {
    work((int)(long)arg);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: held threads|forks PIDFILE SECS\n");
        return 2;
    }
    secs = atof(argv[3]);
    FILE *f = fopen(argv[2], "w");
    if (!f || fprintf(f, "%d\n", getpid()) < 0 || fclose(f)) return 1;
    char go;
    if (read(0, &go, 1) != 1) return 1;
    if (!strcmp(argv[1], "threads")) {
        pthread_t t[2];
        for (long i = 0; i < 2; i++)
            if (pthread_create(&t[i], NULL, thread, (void *)i)) return 1;
        for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
        return 0;
    }
    for (int i = 0; i < 2; i++) {
        pid_t pid = fork();
        if (pid < 0) return 1;
        if (pid == 0) {
            work(i);
            _exit(0);
        }
    }
    int status, ok = 1;
    while (wait(&status) > 0) ok &= WIFEXITED(status) && WEXITSTATUS(status) == 0;
    return ok ? 0 : 1;
}
