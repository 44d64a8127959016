/* roam_start: a creator that keeps running starts two threads at once, as a runtime starts a
 * pool. The first (role=spinner) waits in a sched_yield loop, as OpenBLAS and OpenMP workers
 * spin before they sleep; the second (role=roamer) notes the CPU it starts on (first=<cpu>,
 * before any work) and then works. The main thread computes until the roamer has reported; the
 * spinner spins until then. Each reports (report.h). With two CPUs and the main thread pinned,
 * the roamer is born while both slots hold a running thread (the main thread, and a newborn):
 * it roams, and must start on the spinner's CPU, not on its creator's, where it would stay
 * beside the main thread as long as the spinner keeps the other CPU busy. */
#include "report.h"
#include <pthread.h>
#include <stdatomic.h>

static atomic_int roamer_done;

static void *spinner(void *arg) {
    (void)arg;
    while (!atomic_load(&roamer_done))
        sched_yield();
    report_self("spinner", 0, "");
    return NULL;
}

static void *roamer(void *arg) {
    (void)arg;
    char extra[32];
    snprintf(extra, sizeof extra, "first=%d", sched_getcpu());
    report_self("roamer", 0, extra);
    atomic_store(&roamer_done, 1);
    return NULL;
}

int main(void) {
    pthread_t s, r;
    if (pthread_create(&s, NULL, spinner, NULL) || pthread_create(&r, NULL, roamer, NULL)) {
        fprintf(stderr, "roam_start: pthread_create failed\n");
        return 1;
    }
    volatile double x = 0;
    while (!atomic_load(&roamer_done))
        x += busy_work();
    report_self("main", 0, "");
    pthread_join(r, NULL);
    pthread_join(s, NULL);
    return 0;
}
