/* For the isolation tests: says who it runs as, starts one more thread, optionally has each
 * thread reset its own affinity to every CPU ("reset", as a runtime that ignores its mask
 * would), then prints "ready pid=P tids=A,B" and waits until stdin closes, so that the test
 * reads /proc and /sys while it runs. Output on stdout, one fact per line. */
#define _GNU_SOURCE
#include <grp.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static int reset;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t started = PTHREAD_COND_INITIALIZER;
static long worker_tid;

static void reset_affinity(const char *who) {
    cpu_set_t all;
    CPU_ZERO(&all);
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
        CPU_SET(cpu, &all);
    int rc = sched_setaffinity(0, sizeof all, &all);
    printf("reset %s rc=%d\n", who, rc);
}

static void *worker(void *arg) {
    (void)arg;
    if (reset)
        reset_affinity("worker");
    pthread_mutex_lock(&lock);
    worker_tid = syscall(SYS_gettid);
    pthread_cond_signal(&started);
    pthread_mutex_unlock(&lock);
    for (;;)
        pause();
    return NULL;
}

int main(int argc, char **argv) {
    reset = argc > 1 && strcmp(argv[1], "reset") == 0;
    gid_t groups[256];
    int n = getgroups(256, groups);
    printf("uid=%d gid=%d groups=", (int)getuid(), (int)getgid());
    for (int i = 0; i < n; i++)
        printf("%s%d", i ? "," : "", (int)groups[i]);
    printf("\n");
    if (reset)
        reset_affinity("main");
    pthread_t t;
    if (pthread_create(&t, NULL, worker, NULL) != 0)
        return 1;
    pthread_mutex_lock(&lock);
    while (!worker_tid)
        pthread_cond_wait(&started, &lock);
    pthread_mutex_unlock(&lock);
    printf("ready pid=%d tids=%ld,%ld\n", (int)getpid(), (long)syscall(SYS_gettid), worker_tid);
    fflush(stdout);
    char buf[64];
    while (read(0, buf, sizeof buf) > 0) {
    }
    return 0;
}
