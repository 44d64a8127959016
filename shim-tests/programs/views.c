/* views: what a program reads back from the affinity calls.
 * The main thread reads its mask three ways (sched_getaffinity, pthread_getaffinity_np,
 * syscall(SYS_sched_getaffinity), whose raw return value it prints), then starts one thread
 * per CPU in that mask. Thread i reads its own mask, pins itself with pthread_setaffinity_np
 * to the i-th CPU in it, and checks the binding took: it reads the mask back three ways, each
 * must be exactly that CPU (a program that verifies its binding, as pi_stress does, quits or
 * hangs otherwise). The threads stay alive until all have reported. Then the main thread pins
 * itself to the last CPU of its mask and forks: the child reads the mask it inherited.
 * Reports: main (view=, pthread=, raw=), pin (asked=, rc=, before=, readback=, sched=,
 * syscall=), child (view=). Lists are comma-separated CPU numbers. */
#include "report.h"
#include <pthread.h>
#include <sys/wait.h>

static void list_of(const cpu_set_t *set, char *out, size_t len) {
    size_t at = 0;
    out[0] = 0;
    for (int c = 0; c < CPU_SETSIZE && at + 8 < len; c++)
        if (CPU_ISSET(c, set))
            at += snprintf(out + at, len - at, "%s%d", at ? "," : "", c);
    if (!at)
        snprintf(out, len, "none");
}

/* The i-th CPU of set, or -1. */
static int nth_cpu(const cpu_set_t *set, int i) {
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, set) && i-- == 0)
            return c;
    return -1;
}

static pthread_barrier_t all_reported;

static void *pin(void *arg) {
    long id = (long)arg;
    cpu_set_t mine, want, back, sched, raw;
    char before[256], readback[256], by_sched[256], by_syscall[256], extra[1200];
    if (sched_getaffinity(0, sizeof mine, &mine) != 0) {
        perror("views: sched_getaffinity");
        exit(102);
    }
    list_of(&mine, before, sizeof before);
    int cpu = nth_cpu(&mine, (int)id);
    CPU_ZERO(&want);
    CPU_SET(cpu, &want);
    int rc = pthread_setaffinity_np(pthread_self(), sizeof want, &want);
    CPU_ZERO(&back);
    CPU_ZERO(&sched);
    CPU_ZERO(&raw);
    int back_rc = pthread_getaffinity_np(pthread_self(), sizeof back, &back);
    int sched_rc = sched_getaffinity(0, sizeof sched, &sched);
    long raw_rc = syscall(SYS_sched_getaffinity, 0, sizeof raw, &raw);
    list_of(&back, readback, sizeof readback);
    list_of(&sched, by_sched, sizeof by_sched);
    list_of(&raw, by_syscall, sizeof by_syscall);
    snprintf(extra, sizeof extra,
             "asked=%d rc=%d before=%s readback=%s back_rc=%d sched=%s sched_rc=%d syscall=%s "
             "raw=%ld",
             cpu, rc, before, readback, back_rc, by_sched, sched_rc, by_syscall, raw_rc);
    report_self("pin", id, extra);
    pthread_barrier_wait(&all_reported);
    return NULL;
}

int main(void) {
    cpu_set_t mine, by_pthread, raw;
    char view[256], pthread_view[256], extra[800];
    CPU_ZERO(&raw);
    if (sched_getaffinity(0, sizeof mine, &mine) != 0 ||
        pthread_getaffinity_np(pthread_self(), sizeof by_pthread, &by_pthread) != 0) {
        perror("views: reading the mask");
        return 102;
    }
    long raw_rc = syscall(SYS_sched_getaffinity, 0, sizeof raw, &raw);
    list_of(&mine, view, sizeof view);
    list_of(&by_pthread, pthread_view, sizeof pthread_view);
    char by_syscall[256];
    list_of(&raw, by_syscall, sizeof by_syscall);
    snprintf(extra, sizeof extra, "view=%s pthread=%s syscall=%s raw=%ld", view, pthread_view,
             by_syscall, raw_rc);
    report_self("main", 0, extra);

    int n = CPU_COUNT(&mine);
    pthread_t threads[CPU_SETSIZE];
    pthread_barrier_init(&all_reported, NULL, (unsigned)n);
    for (long i = 0; i < n; i++) {
        int err = pthread_create(&threads[i], NULL, pin, (void *)i);
        if (err != 0) {
            fprintf(stderr, "views: pthread_create: %s\n", strerror(err));
            return 101;
        }
    }
    for (int i = 0; i < n; i++)
        pthread_join(threads[i], NULL);

    cpu_set_t last;
    CPU_ZERO(&last);
    CPU_SET(nth_cpu(&mine, n - 1), &last);
    if (sched_setaffinity(0, sizeof last, &last) != 0) {
        perror("views: sched_setaffinity");
        return 103;
    }
    pid_t child = fork();
    if (child == 0) {
        cpu_set_t inherited;
        char list[256], child_extra[300];
        sched_getaffinity(0, sizeof inherited, &inherited);
        list_of(&inherited, list, sizeof list);
        snprintf(child_extra, sizeof child_extra, "view=%s", list);
        report_self("child", 0, child_extra);
        _exit(0);
    }
    int status = 0;
    if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0) {
        fprintf(stderr, "views: the forked child failed\n");
        return 104;
    }
    return 0;
}
