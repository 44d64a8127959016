/* asan_overflow: a thread reads one byte past an 8-byte heap block, then main prints
 * "no overflow caught" and exits 0. Built with -fsanitize=address, ASan stops the program at the
 * read with a heap-buffer-overflow report and exit code 1: the runtime is live. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static void *reader(void *block) {
    volatile char *p = block;
    return (void *)(long)p[8];
}

int main(void) {
    char *block = malloc(8);
    pthread_t t;
    void *value;
    if (!block || pthread_create(&t, NULL, reader, block) != 0)
        return 101;
    pthread_join(t, &value);
    free(block);
    printf("no overflow caught\n");
    return 0;
}
