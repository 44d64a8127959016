/* pthreads WORKERS [EXIT_CODE]: the main thread and WORKERS busy threads, all alive together,
 * each reporting its CPU and allowed list from inside; exits with EXIT_CODE (default 0). */
#include "report.h"
#include <pthread.h>

static pthread_barrier_t all_alive, all_reported;

static void *worker(void *arg) {
    long id = (long)arg;
    busy_work();
    pthread_barrier_wait(&all_alive);
    report_self("worker", id, "");
    pthread_barrier_wait(&all_reported);
    return NULL;
}

int main(int argc, char **argv) {
    long workers = argc > 1 ? atol(argv[1]) : 1;
    int code = argc > 2 ? atoi(argv[2]) : 0;
    if (workers < 0 || workers > 1000) {
        fprintf(stderr, "pthreads: bad worker count\n");
        return 100;
    }
    pthread_t *threads = calloc(workers ? workers : 1, sizeof *threads);
    pthread_barrier_init(&all_alive, NULL, workers + 1);
    pthread_barrier_init(&all_reported, NULL, workers + 1);
    for (long i = 0; i < workers; i++) {
        int rc = pthread_create(&threads[i], NULL, worker, (void *)i);
        if (rc != 0) {
            fprintf(stderr, "pthreads: pthread_create: %s\n", strerror(rc));
            return 101;
        }
    }
    pthread_barrier_wait(&all_alive);
    report_self("main", 0, "");
    pthread_barrier_wait(&all_reported);
    for (long i = 0; i < workers; i++)
        pthread_join(threads[i], NULL);
    free(threads);
    return code;
}
