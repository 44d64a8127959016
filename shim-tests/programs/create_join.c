/* create_join N [together]: creates N threads one after another, each joined at once, and
 * exits; with "together", all N live at once (each waits at a barrier until the last is
 * created), so under the shim each takes a slot of its own. No stdio: the heap calls it makes
 * are glibc's own for thread stacks (none: mmap) and nothing else. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static pthread_barrier_t all;

static void *nothing(void *arg) { return arg; }

static void *meet(void *arg) {
    pthread_barrier_wait(&all);
    return arg;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 4;
    if (argc > 2 && strcmp(argv[2], "together") == 0) {
        pthread_t t[64];
        if (n < 1 || n > 64 || pthread_barrier_init(&all, NULL, n + 1) != 0) return 2;
        for (int i = 0; i < n; i++)
            if (pthread_create(&t[i], NULL, meet, NULL) != 0) return 1;
        pthread_barrier_wait(&all);
        for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
        return 0;
    }
    for (int i = 0; i < n; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, nothing, NULL) != 0) return 1;
        pthread_join(t, NULL);
    }
    return 0;
}
