/* Threads that sleep (or spin) until goset's housekeeper has placed every one of them.
 *
 * Built with `gcc -static -pthread`, so LD_PRELOAD cannot reach it: only the housekeeper places
 * its threads; it moves threads that sleep to its own CPU, and gives busy ones a slot. First
 * the program widens its mask to every CPU, so that a single CPU inherited from a shell the shim
 * placed cannot pass for a placement. argv[1] threads (default 1) wait on a condition variable,
 * or spin with argv[3] = "busy"; main checks each in turn until it is allowed exactly one CPU,
 * or argv[2] seconds (default 60) pass. Prints `nofile <soft RLIMIT_NOFILE>` first (what the
 * task was given), then `placed <k> of <n>`. Exit status 0 when every thread was placed, 3 on
 * the deadline. Stacks are 64 KiB, so thousands of threads cost little memory. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static atomic_int done;
static int busy;
static atomic_int *tids;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *sleeper(void *arg) {
    atomic_store(&tids[(long)arg], (int)syscall(SYS_gettid));
    while (busy && !atomic_load(&done)) {
    }
    pthread_mutex_lock(&lock);
    while (!done) pthread_cond_wait(&wake, &lock);
    pthread_mutex_unlock(&lock);
    return NULL;
}

/* Whether thread tid is allowed exactly one CPU. */
static int placed(int tid) {
    cpu_set_t set;
    return sched_getaffinity(tid, sizeof set, &set) == 0 && CPU_COUNT(&set) == 1;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1;
    double deadline = now() + (argc > 2 ? atof(argv[2]) : 60);
    busy = argc > 3 && strcmp(argv[3], "busy") == 0;
    cpu_set_t every;
    memset(&every, 0xff, sizeof every);
    sched_setaffinity(0, sizeof every, &every);
    struct rlimit nofile;
    getrlimit(RLIMIT_NOFILE, &nofile);
    printf("nofile %llu\n", (unsigned long long)nofile.rlim_cur);
    fflush(stdout);
    tids = calloc(n, sizeof *tids);
    pthread_t *threads = calloc(n, sizeof *threads);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    for (long i = 0; i < n; i++)
        if (pthread_create(&threads[i], &attr, sleeper, (void *)i) != 0) {
            perror("pthread_create");
            return 1;
        }
    int k = 0;
    while (k < n && now() < deadline) {
        int tid = atomic_load(&tids[k]);
        if (tid != 0 && placed(tid))
            k++;
        else
            usleep(20000);
    }
    pthread_mutex_lock(&lock);
    atomic_store(&done, 1);
    pthread_cond_broadcast(&wake);
    pthread_mutex_unlock(&lock);
    for (int i = 0; i < n; i++) pthread_join(threads[i], NULL);
    printf("placed %d of %d\n", k, n);
    return k == n ? 0 : 3;
}
