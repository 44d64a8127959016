/* pool [COUNT [WIDTH]]: creates and ends COUNT threads (default 1000) with at most WIDTH
 * (default 2, at most 8) pool threads alive at once. Thread i is created after thread i-WIDTH
 * has been joined and while threads i-WIDTH+1 .. i-1 are still alive (they wait for permission
 * to end), so all of them are alive together when thread i reports. The main thread stays alive
 * throughout and reports first. Each pool thread lives over a millisecond: threads that end
 * sooner, one after another, are born beside their waiting creator (brief_children.c). */
/* 1000 threads: a little less work each, still real work. */
#define BUSY_ITERATIONS 200000L
#include "report.h"
#include <pthread.h>
#include <semaphore.h>

struct member {
    pthread_t thread;
    long id;
    sem_t ready; /* posted by the thread once it has reported */
    sem_t may_end; /* posted by main when the thread may return */
};

static void *body(void *arg) {
    struct member *m = arg;
    report_self("pool", m->id, "");
    usleep(2000);
    sem_post(&m->ready);
    while (sem_wait(&m->may_end) != 0 && errno == EINTR) {
    }
    return NULL;
}

static int start(struct member *m, long id) {
    m->id = id;
    sem_init(&m->ready, 0, 0);
    sem_init(&m->may_end, 0, 0);
    int rc = pthread_create(&m->thread, NULL, body, m);
    if (rc != 0) {
        fprintf(stderr, "pool: pthread_create %ld: %s\n", id, strerror(rc));
        return -1;
    }
    while (sem_wait(&m->ready) != 0 && errno == EINTR) {
    }
    return 0;
}

static void finish(struct member *m) {
    sem_post(&m->may_end);
    pthread_join(m->thread, NULL);
    sem_destroy(&m->ready);
    sem_destroy(&m->may_end);
}

int main(int argc, char **argv) {
    long count = argc > 1 ? atol(argv[1]) : 1000;
    long width = argc > 2 ? atol(argv[2]) : 2;
    if (width < 1 || width > 8 || count < width) {
        fprintf(stderr, "pool: need 1 <= WIDTH <= 8 and COUNT >= WIDTH\n");
        return 100;
    }
    report_self("main", 0, "");
    struct member members[8];
    for (long i = 0; i < count; i++) {
        struct member *m = &members[i % width];
        if (i >= width)
            finish(m); /* thread i-WIDTH ends; the younger ones are still alive */
        if (start(m, i) != 0)
            return 101;
    }
    for (long i = count - width; i < count; i++)
        finish(&members[i % width]);
    return 0;
}
