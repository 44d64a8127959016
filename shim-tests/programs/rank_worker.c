/* rank_worker: a GPU rank's first threads. A thread started by a constructor, before main (as
 * the CUDA runtime, NCCL or UCX start theirs during initialisation), then one worker thread of
 * main's; each reports its CPU and allowed list, with the rank= its environment gives
 * (LOCAL_RANK). */
#include "report.h"
#include <pthread.h>

static pthread_t early;
static char extra[64];

static void *early_thread(void *arg) {
    (void)arg;
    report_self("early", 0, extra);
    return NULL;
}

__attribute__((constructor)) static void before_main(void) {
    const char *rank = getenv("LOCAL_RANK");
    snprintf(extra, sizeof extra, "rank=%s", rank ? rank : "none");
    if (pthread_create(&early, NULL, early_thread, NULL) != 0) {
        fprintf(stderr, "rank_worker: pthread_create before main failed\n");
        exit(101);
    }
}

static void *worker(void *arg) {
    (void)arg;
    report_self("worker", 1, extra);
    return NULL;
}

int main(void) {
    pthread_t w;
    if (pthread_create(&w, NULL, worker, NULL) != 0) {
        fprintf(stderr, "rank_worker: pthread_create failed\n");
        return 101;
    }
    report_self("main", 0, extra);
    pthread_join(w, NULL);
    pthread_join(early, NULL);
    return 0;
}
