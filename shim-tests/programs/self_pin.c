/* self_pin: threads that pin themselves to a CPU other than the one they are on.
 * The main thread uses sched_setaffinity(0, ...), a second thread pthread_setaffinity_np(self),
 * a third libc's syscall(SYS_sched_setaffinity, 0, ...) (LLVM libomp's path). The workers run
 * one after the other. Each reports rc=<the call's return value> asked=<the CPU it asked for>. */
#include "report.h"
#include <pthread.h>

static int by_sched(const cpu_set_t *set) {
    return sched_setaffinity(0, sizeof *set, set);
}

static int by_pthread(const cpu_set_t *set) {
    return pthread_setaffinity_np(pthread_self(), sizeof *set, set);
}

static int by_syscall(const cpu_set_t *set) {
    return (int)syscall(SYS_sched_setaffinity, 0, sizeof *set, set);
}

/* Works, asks `pin` to move this thread to the CPU after the one it is on, and reports. */
static void pin_elsewhere(const char *role, long id, const char *call,
                          int (*pin)(const cpu_set_t *)) {
    busy_work();
    int want = (sched_getcpu() + 1) % cpu_count();
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(want, &set);
    int rc = pin(&set);
    char extra[128];
    snprintf(extra, sizeof extra, "call=%s rc=%d asked=%d", call, rc, want);
    report_self(role, id, extra);
}

static void *with_pthread(void *arg) {
    (void)arg;
    pin_elsewhere("worker", 1, "pthread_setaffinity_np", by_pthread);
    return NULL;
}

static void *with_syscall(void *arg) {
    (void)arg;
    pin_elsewhere("worker", 2, "syscall", by_syscall);
    return NULL;
}

int main(void) {
    pin_elsewhere("main", 0, "sched_setaffinity", by_sched);
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
