/* A creator that spawns brief threads one after another, each joined before the next (a
 * create-and-join loop, as a churning server's dispatcher does).
 *
 * brief_children COUNT: prints
 *   main allowed=<its kernel mask>
 *   child <i> allowed=<its kernel mask>
 * for each child, the mask read from /proc (the kernel's, not the shim's answer to
 * sched_getaffinity). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char masks[1000][256];

static void allowed(char *out, size_t size) {
    FILE *f = fopen("/proc/thread-self/status", "r");
    char line[512];
    snprintf(out, size, "?");
    if (!f) return;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "Cpus_allowed_list:", 18)) {
            char *v = line + 18;
            v += strspn(v, " \t");
            v[strcspn(v, "\n")] = 0;
            snprintf(out, size, "%s", v);
        }
    fclose(f);
}

static void *child(void *arg) {
    char *out = arg;
    allowed(out, 256);
    return NULL;
}

int main(int argc, char **argv) {
    int count = argc > 1 ? atoi(argv[1]) : 0;
    if (count < 1 || count > 1000) {
        fprintf(stderr, "usage: brief_children COUNT (1-1000)\n");
        return 2;
    }
    char own[256];
    allowed(own, sizeof own);
    printf("main allowed=%s\n", own);
    for (int i = 0; i < count; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, child, masks[i]) || pthread_join(t, NULL)) return 1;
    }
    for (int i = 0; i < count; i++) printf("child %d allowed=%s\n", i, masks[i]);
    return 0;
}
