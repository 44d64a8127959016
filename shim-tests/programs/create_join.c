/* create_join N: creates N threads one after another, each joined at once, and exits. No
 * stdio: the heap calls it makes are glibc's own for thread stacks (none: mmap) and nothing
 * else. */
#include <pthread.h>
#include <stdlib.h>

static void *nothing(void *arg) { return arg; }

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 4;
    for (int i = 0; i < n; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, nothing, NULL) != 0) return 1;
        pthread_join(t, NULL);
    }
    return 0;
}
