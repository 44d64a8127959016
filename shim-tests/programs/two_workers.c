/* two_workers: the main thread starts two busy workers and waits for them in join, as a program
 * that hands all its work to threads does. Each worker computes, then reports (report.h) as
 * role=worker id=0|1 while the other is still alive; exits 0. */
#include "report.h"
#include <pthread.h>

static pthread_barrier_t all_reported;

static void *worker(void *arg) {
    busy_work();
    report_self("worker", (long)arg, "");
    pthread_barrier_wait(&all_reported);
    return NULL;
}

int main(void) {
    pthread_t threads[2];
    pthread_barrier_init(&all_reported, NULL, 2);
    for (long i = 0; i < 2; i++) {
        int rc = pthread_create(&threads[i], NULL, worker, (void *)i);
        if (rc != 0) {
            fprintf(stderr, "two_workers: pthread_create: %s\n", strerror(rc));
            return 101;
        }
    }
    for (int i = 0; i < 2; i++)
        pthread_join(threads[i], NULL);
    return 0;
}
