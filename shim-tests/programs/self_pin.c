/* self_pin: threads that pin themselves to a CPU other than the one they are on.
 * The main thread uses sched_setaffinity(0, ...), a second thread pthread_setaffinity_np(self),
 * a third libc's syscall(SYS_sched_setaffinity, 0, ...) (LLVM libomp's path). The workers run
 * one after the other. Each reports rc=<the call's return value> asked=<the CPU it asked for>. */
#include "report.h"
#include <pthread.h>

static void other_cpu(cpu_set_t *set, int *want) {
    *want = (sched_getcpu() + 1) % cpu_count();
    CPU_ZERO(set);
    CPU_SET(*want, set);
}

static void report_pin(const char *role, long id, const char *call, int rc, int want) {
    char extra[128];
    snprintf(extra, sizeof extra, "call=%s rc=%d asked=%d", call, rc, want);
    report_self(role, id, extra);
}

static void *with_pthread(void *arg) {
    (void)arg;
    busy_work();
    cpu_set_t set;
    int want;
    other_cpu(&set, &want);
    int rc = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    report_pin("worker", 1, "pthread_setaffinity_np", rc, want);
    return NULL;
}

static void *with_syscall(void *arg) {
    (void)arg;
    busy_work();
    cpu_set_t set;
    int want;
    other_cpu(&set, &want);
    int rc = (int)syscall(SYS_sched_setaffinity, 0, sizeof set, &set);
    report_pin("worker", 2, "syscall", rc, want);
    return NULL;
}

int main(void) {
    busy_work();
    cpu_set_t set;
    int want;
    other_cpu(&set, &want);
    int rc = sched_setaffinity(0, sizeof set, &set);
    report_pin("main", 0, "sched_setaffinity", rc, want);
    void *(*bodies[2])(void *) = {with_pthread, with_syscall};
    for (int i = 0; i < 2; i++) {
        pthread_t t;
        int err = pthread_create(&t, NULL, bodies[i], NULL);
        if (err != 0) {
            fprintf(stderr, "self_pin: pthread_create: %s\n", strerror(err));
            return 101;
        }
        pthread_join(t, NULL);
    }
    return 0;
}
