/* A program that reuses descriptor numbers (shim-tests/tests/robust/descriptors.rs), then makes the
 * shim log: two threads, each asking for a CPU with sched_setaffinity, and the main thread too.
 *
 *   descriptors closeall FILE   closes every descriptor but stdout (close_range), then opens
 *                               FILE, which gets the lowest number (0)
 *   descriptors takeover FILE   opens FILE, then puts it on every other descriptor number it
 *                               finds open above 2 (dup2): wherever the shim keeps its log
 *   descriptors stderr FILE     opens FILE onto fd 2 (dup2), as a daemon does
 *   descriptors stderr_takeover FILE   both: FILE on fd 2 and on every number above 2
 *
 * FILE receives exactly "before\n" and "after\n" from the program; the shim must add nothing.
 * Reports: one per worker (with its tid) and the main thread's with taken=<numbers taken>. */
#include "report.h"
#include <dirent.h>
#include <pthread.h>

static void *worker(void *arg) {
    long id = (long)arg;
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(0, &s);
    sched_setaffinity(0, sizeof s, &s);
    report_self("worker", id, "");
    return NULL;
}

/* Puts `own` on every open descriptor above 2 but itself; how many. */
static int take_over(int own) {
    int numbers[256], n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    struct dirent *e;
    while ((e = readdir(d)) && n < 256) {
        int fd = atoi(e->d_name);
        if (e->d_name[0] != '.' && fd > 2 && fd != own && fd != dirfd(d))
            numbers[n++] = fd;
    }
    closedir(d);
    for (int i = 0; i < n; i++)
        dup2(own, numbers[i]);
    return n;
}

static void put(int fd, const char *text) {
    if (write(fd, text, strlen(text)) < 0)
        exit(3);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: descriptors closeall|takeover|stderr|stderr_takeover FILE\n");
        return 2;
    }
    const char *mode = argv[1], *path = argv[2];
    int flags = O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC;
    int own, taken = 0;
    if (strcmp(mode, "closeall") == 0) {
        close(0);
        close(2);
        syscall(SYS_close_range, 3U, ~0U, 0);
        own = open(path, flags, 0644);
        if (own != 0)
            return 4;
    } else {
        own = open(path, flags, 0644);
        if (own < 0)
            return 4;
        if (strncmp(mode, "stderr", 6) == 0) {
            dup2(own, 2);
        }
        if (strcmp(mode, "takeover") == 0 || strcmp(mode, "stderr_takeover") == 0)
            taken = take_over(own);
    }
    put(own, "before\n");
    pthread_t t[2];
    for (long i = 0; i < 2; i++)
        if (pthread_create(&t[i], NULL, worker, (void *)(i + 1)) != 0)
            return 5;
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(0, &s);
    sched_setaffinity(0, sizeof s, &s);
    put(own, "after\n");
    char extra[32];
    snprintf(extra, sizeof extra, "taken=%d", taken);
    report_self("main", 0, extra);
    return 0;
}
